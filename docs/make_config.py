"""Write docs/configuration.md, every training-config key, sweep-file key and backend parameter, from the
declarations that also parse and check them (the same lines `spladekit keys` prints).

python docs/make_config.py > docs/configuration.md     # tests/test_docs.py fails when it is out of date
"""

from __future__ import annotations

import json

from spladekit.cli.keys import KINDS, reference

HEADER = """# Configuration reference

Generated from the declarations by `python docs/make_config.py > docs/configuration.md` (a test fails when it is
out of date); `spladekit keys train|sweep|backends` prints the same. Each value is declared once, with its type,
default, allowed values and help (`spladekit.common.schema`): from that declaration come the parsing of YAML
files, `--set KEY=VALUE` and `--param NAME=VALUE`, the range checks, the one-line errors and this page. An unknown
key, or a value outside what is listed here, is refused before any work, naming the file and the key.
How the keys fit together: [training](training.md), [experiments](experiments.md), [evaluation](evaluation.md).
"""

TITLES = {"train": "Training config", "sweep": "Sweep file", "backends": "Backend parameters"}


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("<", "&lt;")


def main() -> None:
    print(HEADER)
    for kind in KINDS:
        print(f"## {TITLES[kind]}\n")
        for section, declared in reference(kind).items():
            print(f"### {section}\n")
            print("| key | accepts | default | what it does |")
            print("|---|---|---|---|")
            for item in declared:
                default = json.dumps(item.default)
                accepts = (f"{item.note}; " if item.note else "") + item.expected()
                print(f"| `{item.key}` | {cell(accepts)} | `{default}` | {cell(item.help)} |")
            print()


if __name__ == "__main__":
    main()
