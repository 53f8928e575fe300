"""Named evaluation suites: which collections, which measures (ir_measures names).

=============  =====================================================  ==============================
suite          collections                                            measures
=============  =====================================================  ==============================
msmarco-dev    ir_datasets ``msmarco-passage/dev/small``              RR@10 (MRR@10), R@1000
dl19           ir_datasets ``msmarco-passage/trec-dl-2019/judged``    nDCG@10, R(rel=2)@1000
beir13         13 ir_datasets ``beir/…`` test sets                    nDCG@10 each + mean
nanobeir       13 ``zeta-alpha-ai/Nano…`` Hugging Face datasets       nDCG@10 each + mean
=============  =====================================================  ==============================

With ``root``, every member is read from the local folder ``root/<member name>`` instead (BEIR or
parquet layout, see :mod:`spladekit.data.collections`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from spladekit.common.errors import InputError
from spladekit.data.collections import Collection, load_collection


@dataclass(frozen=True)
class Suite:
    name: str
    members: tuple[tuple[str, str], ...]  # (member name = local folder name, remote id)
    measures: tuple[str, ...]


BEIR13 = (
    "arguana",
    "climate-fever",
    "dbpedia-entity/test",
    "fever/test",
    "fiqa/test",
    "hotpotqa/test",
    "nfcorpus/test",
    "nq",
    "quora/test",
    "scidocs",
    "scifact/test",
    "trec-covid",
    "webis-touche2020/v2",
)
NANOBEIR = (
    "NanoArguAna",
    "NanoClimateFEVER",
    "NanoDBPedia",
    "NanoFEVER",
    "NanoFiQA2018",
    "NanoHotpotQA",
    "NanoMSMARCO",
    "NanoNFCorpus",
    "NanoNQ",
    "NanoQuoraRetrieval",
    "NanoSCIDOCS",
    "NanoSciFact",
    "NanoTouche2020",
)

SUITES = {
    suite.name: suite
    for suite in (
        Suite("msmarco-dev", (("msmarco-dev", "msmarco-passage/dev/small"),), ("RR@10", "R@1000")),
        Suite("dl19", (("dl19", "msmarco-passage/trec-dl-2019/judged"),), ("nDCG@10", "R(rel=2)@1000")),
        Suite("beir13", tuple((name.split("/")[0], f"beir/{name}") for name in BEIR13), ("nDCG@10",)),
        Suite("nanobeir", tuple((name, f"zeta-alpha-ai/{name}") for name in NANOBEIR), ("nDCG@10",)),
    )
}


def load_suite(name: str, root: str | Path | None = None, split: str = "test") -> Iterator[Collection]:
    """Yield the suite's collections one at a time (each with the suite's measures)."""
    suite = SUITES[name]
    for member, remote in suite.members:
        if root is not None:
            folder = Path(root) / member
            if not folder.is_dir():
                raise InputError(f"suite {name!r} needs a folder {member!r} here", root)
            collection = load_collection(folder, split, name=member)
        else:
            collection = load_collection(remote, split, name=member)
        yield replace(collection, measures=suite.measures)
