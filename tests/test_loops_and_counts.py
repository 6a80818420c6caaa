"""One rule for loops and one kernel count, the same in every command (a MaxText
train step scans its layers in a ``while`` loop: predicted time counted each body
once, 22.1 ms against 34.6 ms measured; kernel counts were 99 or 197 by command)."""

from __future__ import annotations

import pytest

from hlo_analysis import devices
from hlo_analysis.cost import analyze, executions, kernel_instructions, known_trip_count
from hlo_analysis.roofline import roofline
from hlo_lab.study import kernels
from hlo_tools import parse

LOOP = """HloModule loop

fused_body {
  x = f32[1024]{0} parameter(0)
  e = f32[1024]{0} exponential(x)
  ROOT m = f32[1024]{0} multiply(e, x)
}

body {
  st = (s32[], f32[1024]{0}) parameter(0)
  i = s32[] get-tuple-element(st), index=0
  x = f32[1024]{0} get-tuple-element(st), index=1
  f = f32[1024]{0} fusion(x), kind=kLoop, calls=fused_body
  one = s32[] constant(1)
  i2 = s32[] add(i, one)
  ROOT r = (s32[], f32[1024]{0}) tuple(i2, f)
}

cond {
  st = (s32[], f32[1024]{0}) parameter(0)
  i = s32[] get-tuple-element(st), index=0
  n = s32[] constant(TRIPS)
  ROOT lt = pred[] compare(i, n), direction=LT
}

ENTRY e {
  p = f32[1024]{0} parameter(0)
  z = s32[] constant(0)
  t = (s32[], f32[1024]{0}) tuple(z, p)
  w = (s32[], f32[1024]{0}) while(t), condition=cond, body=body{CONFIG}
  ROOT out = f32[1024]{0} get-tuple-element(w), index=1
}
"""


def _loop(trips: int, known: bool):
    config = f', backend_config={{"known_trip_count":{{"n":"{trips}"}}}}' if known else ""
    return parse(LOOP.replace("TRIPS", str(trips)).replace("{CONFIG}", config))


def test_known_trip_counts_multiply_the_body_in_the_prediction():
    h100 = devices.load("h100")
    once, seven = roofline(_loop(1, True), h100), roofline(_loop(7, True), h100)
    body = [k for k in seven.kernels if k.computation == "body"]
    assert body and all(k.executions == 7 for k in body)
    per_kernel = {k.name: k.time_s for k in once.kernels}
    assert seven.time_s == pytest.approx(sum(per_kernel[k.name] * k.executions for k in seven.kernels))
    assert seven.time_s > 3 * once.time_s
    assert seven.flops == pytest.approx(sum(k.flops * k.executions for k in seven.kernels))
    assert seven.flops > 6 * once.flops
    assert "counted per iteration" in seven.loops_note
    # XLA's cost analysis (the totals we match exactly) still counts the body once
    assert analyze(_loop(7, True)).flops == analyze(_loop(1, True)).flops


def test_an_unknown_trip_count_is_counted_once_and_said():
    m = _loop(7, False)
    runs, unknown = executions(m)
    assert unknown == 1 and runs["body"] == 1 and known_trip_count(m.entry.get_instruction("w")) is None
    r = roofline(m, devices.load("h100"))
    assert r.unknown_trip_counts == 1 and "without a known trip count counted once" in r.loops_note
    assert executions(_loop(7, True)) == ({"e": 1, "body": 7, "cond": 8}, 0)


def test_one_kernel_count_for_every_command():
    m = _loop(3, True)
    names = [i.name for i in kernel_instructions(m)]
    assert "f" in names and "w" not in names  # the loop's kernel, not the loop
    assert kernels(m) == len(roofline(m, devices.load("h100")).kernels) == len(names)
    assert kernels(m) > sum(1 for i in m.entry if i.opcode.value == "fusion")  # not the entry alone
