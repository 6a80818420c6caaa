"""Shapes and layouts: XLA's spelling in, the same spelling out, typed views."""

import pytest

from hlo_tools.shape import Layout, PrimitiveType, Shape, ShapeError, parse_shape


@pytest.mark.parametrize(
    "text",
    [
        "f32[4,8]{1,0}",
        "f32[]",
        "pred[2,3]{0,1}",
        "bf16[1,2048,4096]{2,1,0}",
        "(f32[], f32[], f32[], f32[], f32[], /*index=5*/f32[])",
        "((f32[10]{0}), f32[20]{0}, s32[])",
        "u32[]{:S(2)}",
        "f32[8,4,1]{0,1,2:T(4,128)}",
        "s4[16,8]{1,0:E(4)}",
        "f32[<=8,4]{1,0}",
        "f32[?,4]{1,0}",
        "token[]",
        "()",
        "f8e4m3fn[3]{0}",
        "c128[1,2,3]{2,1,0}",
    ],
)
def test_round_trip(text):
    assert parse_shape(text).to_text() == text


def test_typed_views():
    s = parse_shape("f32[8,128]{1,0:T(8,128)(2,1)S(1)}")
    assert s.dims == (8, 128)
    assert s.layout.minor_to_major == (1, 0)
    assert s.layout.tiles == ((8, 128), (2, 1))
    assert s.layout.memory_space == 1
    assert s.byte_size == 8 * 128 * 4
    assert s.to_text(print_layout=False) == "f32[8,128]"


def test_byte_sizes():
    assert parse_shape("bf16[2,3]").byte_size == 12
    assert parse_shape("pred[10]").byte_size == 10
    assert parse_shape("s4[16]{0:E(4)}").byte_size == 8  # packed when the layout says so
    assert parse_shape("s4[16]").byte_size == 16  # XLA stores sub-byte types unpacked by default
    assert parse_shape("(f32[2], (s8[3], token[]))").byte_size == 11
    assert parse_shape("c64[2]").byte_size == 16


def test_dynamic_dims():
    s = parse_shape("f32[<=8,4]")
    assert s.dims == (8, 4) and s.dynamic == (True, False) and s.is_dynamic


def test_tuple_index_comments_are_printed_every_five():
    s = Shape.tuple_of([parse_shape("f32[]")] * 11)
    assert s.to_text() == "(f32[], f32[], f32[], f32[], f32[], /*index=5*/f32[], f32[], f32[], f32[], f32[], /*index=10*/f32[])"


def test_leaves_and_subshape():
    s = parse_shape("(f32[2], (s8[3], pred[]))")
    assert [idx for idx, _ in s.leaves()] == [(0,), (1, 0), (1, 1)]
    assert s.subshape((1, 0)).element_type is PrimitiveType.S8


def test_layout_make_orders_fields_like_xla():
    assert Layout.make((1, 0), tiles=((8, 128),), memory_space=1).to_text() == "{1,0:T(8,128)S(1)}"


@pytest.mark.parametrize(
    "text, match",
    [
        ("f33[2]", "unknown element type 'f33'"),
        ("f32[2,x]", "expected a dimension size"),
        ("f32[2,3]{0}", "not a permutation"),
        ("(f32[] f32[])", "expected ',' or '\\)'"),
        ("f32[2] junk", "unexpected text after shape"),
    ],
)
def test_errors(text, match):
    with pytest.raises(ShapeError, match=match):
        parse_shape(text)
