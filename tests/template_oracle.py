#!/usr/bin/env python3
"""template_oracle.py - render chat templates the way transformers'
apply_chat_template does, as the reference for pagellm's Jinja interpreter.

    template_oracle.py OUTDIR TEMPLATE... -- CONVERSATION.json...

For every (template, conversation) pair writes OUTDIR/<template>__<conv>.out
(the rendered bytes) or OUTDIR/<template>__<conv>.err (the error text), and
OUTDIR/<template>__<conv>.ctx.json (the full context both renderers get).
The environment is transformers': jinja2's ImmutableSandboxedEnvironment
with trim_blocks, lstrip_blocks and loopcontrols, raise_exception,
strftime_now, and a tojson that keeps non-ASCII text and key order.
"""
import json
import os
import sys
from datetime import datetime

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(fmt):
    return datetime.now().strftime(fmt)


def make_env():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def main():
    args = sys.argv[1:]
    if len(args) < 3 or "--" not in args:
        print(__doc__, file=sys.stderr)
        return 2
    out = args[0]
    cut = args.index("--")
    templates, convs = args[1:cut], args[cut + 1:]
    os.makedirs(out, exist_ok=True)
    env = make_env()
    for tpath in templates:
        tname = os.path.basename(tpath).rsplit(".", 1)[0]
        with open(tpath, encoding="utf-8") as f:
            source = f.read()
        try:
            compiled = env.from_string(source)
        except Exception as e:  # the template itself does not compile
            compiled, cerr = None, f"{type(e).__name__}: {e}"
        for cpath in convs:
            cname = os.path.basename(cpath).rsplit(".", 1)[0]
            with open(cpath, encoding="utf-8") as f:
                ctx = json.load(f)
            ctx.setdefault("bos_token", "<s>")
            ctx.setdefault("eos_token", "</s>")
            base = os.path.join(out, f"{tname}__{cname}")
            with open(base + ".ctx.json", "w", encoding="utf-8") as f:
                json.dump(ctx, f, ensure_ascii=False)
            for ext in (".out", ".err"):
                if os.path.exists(base + ext):
                    os.remove(base + ext)
            try:
                if compiled is None:
                    raise RuntimeError(cerr)
                text = compiled.render(**ctx)
                with open(base + ".out", "wb") as f:
                    f.write(text.encode("utf-8"))
            except Exception as e:
                with open(base + ".err", "w", encoding="utf-8") as f:
                    f.write(f"{type(e).__name__}: {e}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
