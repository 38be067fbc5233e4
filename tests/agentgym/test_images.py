"""Image observations: their anchors and their PNG bytes (agentgym/images.py)."""

from __future__ import annotations

import struct
import zlib

import numpy as np
import pytest

from agentgym.images import check_image, image_anchor, png_bytes


def _image(seed: int = 0, shape: tuple[int, int, int] = (5, 7, 3)) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size=shape, dtype=np.uint8)


def test_equal_pixels_give_equal_anchors_and_any_change_another():
    image = _image()
    anchor = image_anchor(image)
    assert anchor == image_anchor(image.copy()) and hash(anchor) == hash(image_anchor(image))
    assert anchor[:2] == ("image", (5, 7, 3)) and len(anchor[2]) == 32
    changed = image.copy()
    changed[4, 6, 2] ^= 1
    assert image_anchor(changed) != anchor
    # the same bytes in another shape are another image
    assert image_anchor(image.reshape(7, 5, 3)) != anchor
    # a non-contiguous view is read by its pixels, not its memory
    wide = _image(1, (5, 14, 3))
    assert image_anchor(wide[:, ::2]) == image_anchor(np.ascontiguousarray(wide[:, ::2]))


@pytest.mark.parametrize("bad", [np.zeros((4, 4), np.uint8), np.zeros((4, 4, 4), np.uint8),
                                 np.zeros((4, 4, 3), np.float32), np.zeros((0, 4, 3), np.uint8),
                                 [[1, 2, 3]]])
def test_anything_but_an_rgb_uint8_image_is_refused_in_one_line(bad):
    with pytest.raises(ValueError, match=r"expected an \(H, W, 3\) uint8 image") as error:
        check_image(bad)
    assert "\n" not in str(error.value)
    with pytest.raises(ValueError):
        png_bytes(bad)


def _decode_png(data: bytes) -> np.ndarray:
    """A minimal reader for what png_bytes writes (8-bit RGB, filter 0), by the PNG spec."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    position, chunks = 8, []
    while position < len(data):
        (length,) = struct.unpack(">I", data[position:position + 4])
        kind = data[position + 4:position + 8]
        body = data[position + 8:position + 8 + length]
        (crc,) = struct.unpack(">I", data[position + 8 + length:position + 12 + length])
        assert crc == zlib.crc32(kind + body) & 0xFFFFFFFF
        chunks.append((kind, body))
        position += 12 + length
    assert [kind for kind, _ in chunks] == [b"IHDR", b"IDAT", b"IEND"]
    width, height, depth, colour, *_ = struct.unpack(">IIBBBBB", chunks[0][1])
    assert (depth, colour) == (8, 2)
    rows = np.frombuffer(zlib.decompress(chunks[1][1]), np.uint8).reshape(height, 1 + 3 * width)
    assert (rows[:, 0] == 0).all()
    return rows[:, 1:].reshape(height, width, 3)


def test_png_bytes_decode_to_the_same_pixels():
    image = _image(2, (9, 4, 3))
    data = png_bytes(image)
    assert np.array_equal(_decode_png(data), image)
    assert png_bytes(image) == data  # deterministic


def test_png_bytes_open_in_pillow_where_installed():
    pil = pytest.importorskip("PIL.Image")
    import io

    image = _image(3, (17, 31, 3))
    with pil.open(io.BytesIO(png_bytes(image))) as picture:
        assert picture.mode == "RGB" and picture.size == (31, 17)
        assert np.array_equal(np.asarray(picture), image)
