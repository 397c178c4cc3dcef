"""Renders chat templates with Python's jinja2 the way Hugging Face
transformers does (trim_blocks, lstrip_blocks), as the reference for
chat_test.go. Reads {"templates": {...}, "cases": [...]} on stdin, writes the
rendered texts as JSON on stdout."""
import json
import sys

import jinja2


def main():
    req = json.load(sys.stdin)
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True, loader=jinja2.BaseLoader())
    if req.get("gguf"):
        import gguf
        r = gguf.GGUFReader(req["gguf"])
        f = r.fields["tokenizer.chat_template"]
        req["templates"]["gguf"] = bytes(f.parts[f.data[0]]).decode()
    out = {"templates": req["templates"], "rendered": {}}
    for name, src in req["templates"].items():
        t = env.from_string(src)
        out["rendered"][name] = [
            t.render(messages=c["messages"], add_generation_prompt=c["add_generation_prompt"],
                     bos_token="<s>", eos_token="</s>")
            for c in req["cases"]
        ]
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
