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
        "b(f32[16]{0})",
        "b(f32[])",
        "(b(f32[16]{0}), f32[16]{0})",
        "((b(s32[4]{0})), b(s32[2,8]{0,1}))",
        "b(s4[4]{0:E(4)S(1)})",
        "b(f32[<=4,?]{1,0})",
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


# What XLA's parser (jaxlib's) said about each layout, asked one by one: the
# fields after ':' in its order D, T, L, #, *, E, S, SC, M; P only for sparse arrays.
@pytest.mark.parametrize(
    "text, xla_accepts",
    [
        ("f32[4]{0:T(8)(128)}", True),
        ("f32[4]{0:T()}", True),
        ("f32[4]{0:T(*)}", True),
        ("f32[4]{0:T( 2 , 3 )}", True),
        ("f32[4]{0:D(D)}", True),
        ("f32[4]{0:D(C+~)}", True),
        ("f32[4]{0:#(u32)*(u64)}", True),
        ("f32[4]{0:SC(0:1,2)}", True),
        ("f32[4]{0:M(8)}", True),
        ("f32[4]{0:T(2)L(4)E(4)S(1)}", True),
        ("f32[4]{0:E(-3)}", True),
        ("f32[4]{0:}", True),
        ("f32[]{:S(1)}", True),
        ("f32[4]{0:T(a)}", False),
        ("f32[4]{0:S(1)T(2)}", False),
        ("f32[4]{0:T(2)T(3)}", False),
        ("f32[4]{0:Q(1)}", False),
        ("f32[4]{0:P(f32[4])}", False),
        ("f32[4]{:T(2)}", False),
        ("f32[4]{}", False),
        ("f32[]{}", False),
        ("f32[4]{0:E(99999999999999999999)}", False),
    ],
)
def test_layout_fields_as_xla_reads_them(text, xla_accepts):
    if xla_accepts:
        assert parse_shape(text).layout is not None
    else:
        with pytest.raises(ShapeError):
            parse_shape(text)


@pytest.mark.parametrize(
    "text, match, offset",
    [
        ("f32[9223372036854775807]", None, None),  # int64's largest: XLA takes it
        ("f32[9223372036854775808]", "dimension size 9223372036854775808 is past the int64 range", 4),
        ("f32[2," + "1" * 5000 + "]", r"\(5000 digits\) is past the int64 range", 6),
        ("f32[0000000000000000000000002]", None, None),
        ("f32[\u0663]", "expected a dimension size", 4),  # int('٣') is 3; XLA reads ASCII digits only
        ("token[2]", r"token\[\] takes no dimensions or layout", 6),  # XLA aborts on these
        ("opaque[]{:S(1)}", r"opaque\[\] takes no dimensions or layout", 8),
        ("(f32[],)", "expected a shape", 7),
        ("(/* f32[])", r"unterminated /\* comment", 1),
        ("(" * 101 + "f32[]" + ")" * 101, "nest deeper than 100 levels", 100),
        ("(" * 100_000, "nest deeper than 100 levels", 100),
    ],
)
def test_hostile_shapes(text, match, offset):
    """Located errors, never a hang, a RecursionError or int()'s digit limit."""
    if match is None:
        parse_shape(text)
        return
    with pytest.raises(ShapeError, match=match) as info:
        parse_shape(text)
    assert info.value.offset == offset


def test_a_hundred_levels_of_tuples_still_print_and_compare():
    s = parse_shape("(" * 100 + "f32[2]" + ")" * 100)
    assert s.to_text() == "(" * 100 + "f32[2]" + ")" * 100 and s.compatible(s) and s.byte_size == 8


def test_buffer_shapes_as_xla_reads_them():
    """``b(f32[16])``: XLA's BUFFER kind, an array's buffer.  Its element type,
    dims and layout are the array's (XLA's element_type(), dimensions()); it is
    an array for IsArray, and never compatible with the plain array."""
    s = parse_shape("b(f32[16,2]{0,1})")
    assert s.is_buffer and s.is_array and not s.is_tuple
    assert (s.element_type, s.dims, s.layout.minor_to_major) == (PrimitiveType.F32, (16, 2), (0, 1))
    assert s.buffer_shape == parse_shape("f32[16,2]{0,1}") and not s.buffer_shape.is_buffer
    assert s.byte_size == 16 * 2 * 4 and s.num_elements == 32 and s.rank == 2
    assert s.to_text(print_layout=False) == "b(f32[16,2])"
    assert s.without_layout().to_text() == "b(f32[16,2])" and s.without_layout().is_buffer
    assert s.with_layout((1, 0)).to_text() == "b(f32[16,2]{1,0})"
    assert Shape.buffer_of(parse_shape("f32[16,2]")) == parse_shape("b(f32[16,2])")
    assert s.compatible(parse_shape("b(f32[16,2])")) and s.compatible(parse_shape("b(f32[16,?])"))
    assert not s.compatible(parse_shape("f32[16,2]{0,1}")) and not parse_shape("f32[16,2]").compatible(s)
    assert not s.compatible(parse_shape("b(s32[16,2])"))
    assert parse_shape("(b(f32[2]), s8[3])").byte_size == 11
    assert [leaf.is_buffer for _, leaf in parse_shape("(b(f32[2]), s8[3])").leaves()] == [True, False]
    # spaces and comments between `b` and `(`, as XLA's lexer skips them; bf16 is no buffer
    assert parse_shape("b /* x */ ( f32[4] )").to_text() == "b(f32[4])"
    assert not parse_shape("bf16[2]").is_buffer
    with pytest.raises(ValueError):
        Shape.buffer_of(parse_shape("(f32[2])"))
    with pytest.raises(ValueError):
        parse_shape("f32[2]").buffer_shape


@pytest.mark.parametrize(
    "text, match, offset",
    [
        ("b((f32[2]))", "holds an array shape, not a tuple", 2),  # XLA: MakeValidatedBufferShape fails
        ("b(token[])", r"holds an array shape, not token\[\]", 2),
        ("b(opaque[])", r"holds an array shape, not opaque\[\]", 2),
        ("b(b(f32[2]))", "holds an array shape, not a buffer", 2),
        ("b(" * 100_000, "holds an array shape, not a buffer", 2),
        ("b()", "expected a shape", 2),  # XLA: expected primitive type
        ("b(f32[2],f32[3])", r"expected '\)' at the end of the buffer shape", 8),  # XLA: the same
        ("b(f32[2]", r"expected '\)' at the end of the buffer shape", 8),
        ("b(f32[2]){0}", "unexpected text after shape", 9),  # the layout goes inside
        ("b(f32[2,3]{0})", "not a permutation", 10),
        ("b(x32[2])", "unknown element type 'x32'", 2),
        ("b(/* f32[2])", r"unterminated /\* comment", 2),
        ("b[2]", "unknown element type 'b'", 0),
    ],
)
def test_malformed_buffer_shapes(text, match, offset):
    with pytest.raises(ShapeError, match=match) as info:
        parse_shape(text)
    assert info.value.offset == offset


def test_compatible_is_xlas_shapeutil_compatible():
    """Layouts and bounded-dynamic marks aside; an unbounded `?` size matches any."""
    f4 = parse_shape("f32[4]{0}")
    assert f4.compatible(parse_shape("f32[4]{0:T(2)}")) and f4.compatible(parse_shape("f32[<=4]"))
    assert f4.compatible(parse_shape("f32[?]")) and parse_shape("f32[?]").compatible(f4)
    assert not f4.compatible(parse_shape("f32[<=5]")) and not f4.compatible(parse_shape("f32[?,4]"))
    assert not f4.compatible(parse_shape("bf16[4]")) and not f4.compatible(parse_shape("(f32[4])"))
    assert parse_shape("(f32[4], token[])").compatible(parse_shape("(f32[?]{0}, token[])"))
