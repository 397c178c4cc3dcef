"""Read ovrun's JSON outputs by their documented schema (docs/outputs.md).

Every output starts with "schema": "ovrun.KIND/VERSION". load() accepts a
file without the field (written before outputs carried one), or one of
the kind asked for at a version this script knows or an older one, and
refuses another kind or a newer version with one line naming the file:

    import ovrun_json
    d = ovrun_json.load("out.json", "generate")
    print(d["generated_ids"], d["decode_tokens_per_s"])
"""
import json

# The newest version of each kind these scripts read; the field names they
# use are the ones docs/outputs.md lists for that version.
KNOWN = {"generate": 1, "run": 1, "bench": 1, "loadtest": 1, "cost": 1}


class SchemaError(ValueError):
    """A file of another kind, or written by a newer ovrun."""


def check(doc, kind, where="the document"):
    """Check the schema field of a decoded output against kind; return doc."""
    if kind not in KNOWN:
        raise ValueError(f"unknown output kind {kind!r} (want one of {', '.join(KNOWN)})")
    want = f"ovrun.{kind}/{KNOWN[kind]}"
    if not isinstance(doc, dict):
        raise SchemaError(f"{where}: not a JSON object, want {want}")
    got = doc.get("schema")
    if got is None:
        return doc  # written before outputs carried a schema: version 1
    name, _, version = str(got).partition("/")
    if not version.isdigit() or int(version) < 1:
        raise SchemaError(f"{where}: schema {got!r} is not NAME/VERSION")
    if name != f"ovrun.{kind}":
        raise SchemaError(f"{where}: schema {got} is another kind of file (want ovrun.{kind})")
    if int(version) > KNOWN[kind]:
        raise SchemaError(f"{where}: schema {got} is newer than this script reads ({want}): update scripts/")
    return doc


def load(path, kind):
    """The output of kind ("generate", "run", "bench", "loadtest", "cost") in path, checked."""
    with open(path) as f:
        return check(json.load(f), kind, path)
