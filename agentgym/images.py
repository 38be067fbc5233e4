"""Image observations: their anchor key and their PNG bytes (NumPy and the standard library
only, so the viewer, the engines and the envs share them without Pillow), and the one
place that imports Pillow for the envs that draw with it.

An image observation is an ``(H, W, 3)`` ``uint8`` array, rows top to bottom, RGB.
"""

from __future__ import annotations

import hashlib
import struct
import zlib
from types import SimpleNamespace

import numpy as np

ImageAnchor = tuple[str, tuple[int, ...], str]
"""``("image", shape, digest)``: see :func:`image_anchor`."""

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def check_image(image: object) -> np.ndarray:
    """``image`` as a C-contiguous ``(H, W, 3)`` ``uint8`` array (the same array when it is
    one); ``ValueError`` (one line) if it is not one."""
    array = np.asarray(image)
    if array.dtype != np.uint8 or array.ndim != 3 or array.shape[2] != 3 or 0 in array.shape:
        raise ValueError(f"expected an (H, W, 3) uint8 image, got shape {array.shape} of "
                         f"{array.dtype}")
    return np.ascontiguousarray(array)


def image_anchor(image: np.ndarray) -> ImageAnchor:
    """The ``"observation"`` anchor of a visual env: ``("image", shape, digest)``, where
    ``digest`` is the 128-bit BLAKE2b hex digest of the pixel bytes (C order).

    Two anchors are equal exactly when the images have the same shape and the same pixels
    (up to a hash collision, odds about 2^-128 per pair): the step groups verl-agent forms
    from the image arrays themselves (``to_hashable`` of the flattened pixels), at about
    60 bytes per step instead of the image's size (270 kB for 300 x 300), so anchors stay
    cheap to keep per step, to send between processes and to write to logs.
    """
    array = check_image(image)
    digest = hashlib.blake2b(np.ascontiguousarray(array).tobytes(), digest_size=16).hexdigest()
    return ("image", tuple(int(n) for n in array.shape), digest)


def png_bytes(image: np.ndarray, *, level: int = 6) -> bytes:
    """``image`` encoded as a PNG file (8-bit RGB, no filter, zlib ``level``), for the
    viewer and for data URLs. Decoding gives back the same pixels."""
    array = check_image(image)
    height, width, _ = array.shape
    rows = np.zeros((height, 1 + 3 * width), dtype=np.uint8)  # each row: filter byte 0, pixels
    rows[:, 1:] = array.reshape(height, 3 * width)
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit, colour type RGB
    return b"".join((_PNG_SIGNATURE, _chunk(b"IHDR", header),
                     _chunk(b"IDAT", zlib.compress(rows.tobytes(), level)), _chunk(b"IEND", b"")))


def _chunk(kind: bytes, data: bytes) -> bytes:
    return (struct.pack(">I", len(data)) + kind + data
            + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))


def require_pillow() -> SimpleNamespace:
    """Pillow's ``Image``, ``ImageDraw`` and ``ImageFont`` modules.

    Raises:
        ModuleNotFoundError: Pillow is not installed (one line naming the extra).
    """
    try:
        from PIL import Image, ImageDraw, ImageFont
    except ModuleNotFoundError:
        raise ModuleNotFoundError("the gym-cards envs and Sokoban's tiles_dir draw with "
                                  "Pillow: pip install 'agentgym-text[vision]'") from None
    return SimpleNamespace(Image=Image, ImageDraw=ImageDraw, ImageFont=ImageFont)
