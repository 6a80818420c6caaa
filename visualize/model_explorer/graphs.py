"""An HLO module as Model Explorer's graphs, and the node data that colours them.

One graph per computation (its id the computation's name); a node per
instruction (its id the instruction's name: unique in a module, the key of a
profile's ``hlo_op`` too), labelled by opcode, its operands as incoming edges, its
shape on its output, and a fusion, call or loop linked to the graphs of the
computations it calls. The dicts have Model Explorer's field names
(``graph_builder.Graph``, ``node_data_builder.ModelNodeData``): its JSON adapter
reads the graphs as written, and the adapter (``main``) builds its dataclasses from them.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

from hlo_tools.fileio import write_output
from hlo_tools.ir import Computation, Instruction, Module
from hlo_analysis.cost import analyze
from hlo_analysis.devices import Device
from hlo_analysis.profiles import ProfileJoin
from hlo_analysis.roofline import roofline

#: Overlays and what each value is (node data file stem -> label shown).
OVERLAYS = {
    "measured_time": "measured time per run (us)",
    "predicted_time": "predicted time per run (us)",
    "roofline_pct": "percent of roofline (predicted / measured)",
    "bytes": "bytes accessed per run",
}

# Low to high: green, yellow, red (Model Explorer interpolates between the stops).
_GRADIENT = [{"stop": 0, "bgColor": "#d9f0d3"}, {"stop": 0.5, "bgColor": "#fee08b"}, {"stop": 1, "bgColor": "#d73027"}]
# For percent of roofline high is good: the reverse.
_GRADIENT_GOOD_HIGH = [dict(g, stop=1 - g["stop"]) for g in reversed(_GRADIENT)]


def _kv(key: str, value: Any) -> dict[str, str]:
    return {"key": key, "value": str(value)}


def _node(instr: Instruction) -> dict[str, Any]:
    attrs = [_kv("name", instr.name), _kv("shape", instr.shape)]
    kind = instr.attributes.get("kind") if instr.opcode.value == "fusion" else None
    if kind:
        attrs.append(_kv("fusion kind", kind))
    return {
        "id": instr.name,
        "label": instr.opcode.value,
        "namespace": "",
        "subgraphIds": [c.name for c in instr.called_computations],
        "attrs": attrs,
        "incomingEdges": [{"sourceNodeId": op.name, "sourceNodeOutputId": "0", "targetNodeInputId": str(i)}
                          for i, op in enumerate(instr.operands)],
        "outputsMetadata": [{"id": "0", "attrs": [_kv("tensor_shape", instr.shape)]}],
        "inputsMetadata": [],
    }


def _graph(comp: Computation) -> dict[str, Any]:
    return {"id": comp.name, "nodes": [_node(i) for i in comp]}


def module_graphs(module: Module) -> dict[str, list[dict[str, Any]]]:
    """``{"graphs": [...]}``: the entry computation's graph first, then the others."""
    comps = sorted(module.computations, key=lambda c: c is not module.entry)
    return {"graphs": [_graph(c) for c in comps]}


def node_data(module: Module, device: Device, joined: ProfileJoin | None = None) -> dict[str, dict[str, Any]]:
    """Per overlay (``OVERLAYS``; measured time and percent of roofline only with a
    profile), Model Explorer's node data: graph id -> values by node id."""
    cost = analyze(module)
    graph_of = {i.name: i.parent.name for c in module.computations for i in c}
    values: dict[str, dict[str, float]] = {k: {} for k in OVERLAYS}
    for k in roofline(module, device, cost).kernels:
        values["predicted_time"][k.name] = k.time_s * k.executions * 1e6
        values["bytes"][k.name] = k.bytes_accessed * k.executions
    if joined is not None:
        for k in joined.kernels:
            values["measured_time"][k.name] = k.measured_s * 1e6
            if k.roofline_pct is not None:
                values["roofline_pct"][k.name] = k.roofline_pct
    out = {}
    for overlay, by_node in values.items():
        if not by_node:
            continue
        graphs: dict[str, dict[str, Any]] = {}
        for name, value in by_node.items():
            g = graphs.setdefault(graph_of[name], {"name": OVERLAYS[overlay], "results": {},
                                                    "gradient": _GRADIENT_GOOD_HIGH if overlay == "roofline_pct"
                                                    else _GRADIENT})
            g["results"][name] = {"value": value}
        out[overlay] = graphs
    return out


def write_files(out_dir: str | Path, module: Module, device: Device, joined: ProfileJoin | None = None) -> list[Path]:
    """The module (``NAME.hlo``: the graphs the node ids refer to) and one node-data
    file per overlay in ``out_dir``; returns their paths, the module's first."""
    out = Path(out_dir)
    paths = [write_output(out / f"{module.name}.hlo", module.to_text())]
    for overlay, data in node_data(module, device, joined).items():
        paths.append(write_output(out / f"{overlay}.json", json.dumps(data)))
    return paths


def command_line(paths: list[Path]) -> str:
    """The ``model-explorer`` command that shows ``write_files``' output."""
    return (f"model-explorer {shlex.quote(str(paths[0]))} --extensions=visualize.model_explorer "
            f"--node_data_paths={shlex.quote(','.join(str(p) for p in paths[1:]))}")
