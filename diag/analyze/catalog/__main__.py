"""``python -m diag.analyze.catalog --markdown``: print the catalog table for docs/analyze.md;
``--write FILE`` replaces the table in FILE."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from diag.analyze.catalog.table import markdown, section_of


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m diag.analyze.catalog",
                                     description="the signature catalog as Markdown")
    parser.add_argument("--markdown", action="store_true", help="print the table")
    parser.add_argument("--write", metavar="FILE", help="replace the table in FILE")
    args = parser.parse_args(argv)
    table = markdown()
    if args.write:
        path = Path(args.write)
        doc = path.read_text()
        old = section_of(doc)
        if old is None:
            print(f"{path}: no catalog markers; add the two marker lines where the table goes",
                  file=sys.stderr)
            return 2
        path.write_text(doc.replace(old, table))
    if args.markdown or not args.write:
        print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
