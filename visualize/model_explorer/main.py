"""The Model Explorer adapter: an HLO module file to Model Explorer's graphs.
Model Explorer imports this module (``--extensions=visualize.model_explorer``)
and finds the ``Adapter`` subclass by its metadata."""

from __future__ import annotations

from typing import Any

from model_explorer import Adapter, AdapterMetadata, ModelExplorerGraphs, graph_builder as gb

from hlo_tools import load

from .graphs import module_graphs


def _key_values(items: list[dict[str, str]]) -> list[gb.KeyValue]:
    return [gb.KeyValue(key=kv["key"], value=kv["value"]) for kv in items]


def _graph(g: dict[str, Any]) -> gb.Graph:
    nodes = [gb.GraphNode(
        id=n["id"], label=n["label"], namespace=n["namespace"], subgraphIds=n["subgraphIds"],
        attrs=_key_values(n["attrs"]),
        incomingEdges=[gb.IncomingEdge(**e) for e in n["incomingEdges"]],
        outputsMetadata=[gb.MetadataItem(id=m["id"], attrs=_key_values(m["attrs"])) for m in n["outputsMetadata"]],
    ) for n in g["nodes"]]
    return gb.Graph(id=g["id"], nodes=nodes)


class HloAdapter(Adapter):
    """HLO text (as XLA dumps it, optionally gzip'd): one graph per computation."""

    metadata = AdapterMetadata(
        id="hlo_pass_lab_hlo",
        name="HLO module (hlo-pass-lab)",
        description="XLA HLO text: one graph per computation, fusions and loops linked to their computations",
        source_repo="",
        fileExts=["hlo", "txt", "gz"],
    )

    def __init__(self):
        super().__init__()

    def convert(self, model_path: str, settings: dict) -> ModelExplorerGraphs:
        return {"graphs": [_graph(g) for g in module_graphs(load(model_path))["graphs"]]}
