"""Talks to `ovrun serve` with the real openai Python client, as a user
would, and prints what it got as JSON for serve_test.go to check."""
import json
import sys

import openai

base, question = sys.argv[1], sys.argv[2]
client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0, timeout=120)
out = {}
out["models"] = [m.id for m in client.models.list().data]
r = client.chat.completions.create(model=out["models"][0], temperature=0,
                                   messages=[{"role": "user", "content": question}])
out["chat"] = r.choices[0].message.content
out["chat_finish"] = r.choices[0].finish_reason
out["chat_usage"] = r.usage.completion_tokens
parts = []
for chunk in client.chat.completions.create(model=out["models"][0], temperature=0, stream=True,
                                            messages=[{"role": "user", "content": question}]):
    if chunk.choices and chunk.choices[0].delta.content:
        parts.append(chunk.choices[0].delta.content)
out["chat_stream"] = "".join(parts)
r = client.chat.completions.create(model=out["models"][0], temperature=0, stop=[" Blue"],
                                   messages=[{"role": "user", "content": question}])
out["chat_stop"] = r.choices[0].message.content
r = client.completions.create(model=out["models"][0], prompt="The capital of France is", max_tokens=5, temperature=0)
out["completion"] = r.choices[0].text
out["completion_finish"] = r.choices[0].finish_reason
try:
    client.completions.create(model=out["models"][0], prompt="word " * 600, max_tokens=5)
    out["too_long"] = "accepted"
except openai.BadRequestError as e:
    out["too_long"] = e.status_code
json.dump(out, sys.stdout)
