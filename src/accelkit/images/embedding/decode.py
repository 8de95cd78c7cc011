"""Decode any supported image input to an H×W×3 uint8 RGB array, with one clear error per bad item.

Inputs are paths, bytes, PIL images or H×W×C arrays. JPEGs in RGB or grayscale go through
simplejpeg (libjpeg-turbo), optionally decoding at a reduced DCT scale when the source is much
larger than the target; everything else (PNG, WebP, BMP, GIF first frame, TIFF, CMYK JPEG, ...)
goes through PIL. EXIF orientation is applied on both paths. A pixel limit, read from the header
before any pixel is decoded, stops decompression bombs.
"""

from __future__ import annotations

import io
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from accelkit.errors import DataError, InputError
from accelkit.runtime.storage import ObjectPath

DEFAULT_MAX_PIXELS = 64_000_000
# The formats we decode, and no others: Pillow knows dozens (EPS would start Ghostscript on
# attacker-supplied PostScript). JPEG includes the multi-picture JPEGs (MPO) of phone cameras.
FORMATS = ("JPEG", "PNG", "WEBP", "BMP", "GIF", "TIFF")
_EXIF_ORIENTATION = 0x0112
_JPEG_MAGIC = b"\xff\xd8\xff"


class ImageDecodeError(DataError):
    """One input could not be turned into an image; the message names it and says why."""


@dataclass(frozen=True)
class DecodeOptions:
    """How to decode. `min_size` (height, width) lets the JPEG fast path decode at a reduced
    scale while keeping at least `reduce_margin` × that size, so the antialiased resize after it
    still sees enough pixels; None decodes at full size (exact parity with a full PIL decode)."""

    max_pixels: int = DEFAULT_MAX_PIXELS
    min_size: tuple[int, int] | None = None
    reduce_margin: float = 2.0
    fast_jpeg: bool = True


def describe_input(item: Any) -> str:
    """A short name for an input, for error messages and the CLI's inputs list."""
    if isinstance(item, (str, os.PathLike, ObjectPath)):
        return str(item)
    if isinstance(item, (bytes, bytearray, memoryview)):
        return f"<{len(item)} bytes>"
    if isinstance(item, np.ndarray):
        return f"<array {item.shape} {item.dtype}>"
    try:
        from PIL import Image

        if isinstance(item, Image.Image):
            return f"<PIL image {item.size[0]}x{item.size[1]} {item.mode}>"
    except ImportError:  # pragma: no cover - pillow is a dependency of the extra
        pass
    return f"<{type(item).__name__}>"


def _read_bytes(path: Path) -> bytes:
    name = str(path)
    if not path.exists():
        raise ImageDecodeError(f"{name}: no such file; check the path")
    if path.is_dir():
        raise ImageDecodeError(f"{name}: is a folder, not an image file")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ImageDecodeError(f"{name}: cannot read ({exc.strerror})") from exc
    if not data:
        raise ImageDecodeError(f"{name}: file is empty (0 bytes)")
    return data


def _read_object(path: ObjectPath) -> bytes:
    try:
        data = path.read_bytes()
    except InputError as exc:
        raise ImageDecodeError(str(exc)) from exc
    if not data:
        raise ImageDecodeError(f"{path}: object is empty (0 bytes)")
    return data


def check_pixels(name: str, width: int, height: int, max_pixels: int) -> None:
    if width < 1 or height < 1:
        raise ImageDecodeError(f"{name}: image has no pixels ({width}x{height})")
    if width * height > max_pixels:
        raise ImageDecodeError(
            f"{name}: {width}x{height} = {width * height:,} pixels exceeds the limit of {max_pixels:,} "
            "(possible decompression bomb); raise max_pixels if the image is trusted"
        )


def apply_orientation(array: np.ndarray, orientation: int) -> np.ndarray:
    """Apply an EXIF orientation tag (1-8) to an H×W×C array, as PIL's `ImageOps.exif_transpose`."""
    if orientation == 2:
        return array[:, ::-1]
    if orientation == 3:
        return array[::-1, ::-1]
    if orientation == 4:
        return array[::-1]
    if orientation == 5:
        return array.transpose(1, 0, 2)
    if orientation == 6:
        return np.rot90(array, k=-1)
    if orientation == 7:
        return array.transpose(1, 0, 2)[::-1, ::-1]
    if orientation == 8:
        return np.rot90(array, k=1)
    return array


def _to_rgb(image, name: str) -> np.ndarray:
    """PIL image of any mode -> H×W×3 uint8 RGB, scaling 16-bit and float data correctly."""
    from PIL import Image

    mode = image.mode
    if mode == "RGB":
        return np.asarray(image)
    if mode in ("I;16", "I;16B", "I;16L", "I;16N", "I", "F"):
        # 16-bit/32-bit gray and float: PIL's convert("L") clips instead of scaling.
        values = np.asarray(image)
        if mode == "F":
            top = 1.0 if values.max(initial=0) <= 1.0 else 255.0
        else:
            top = 65535.0 if mode.startswith("I;16") or values.max(initial=0) > 255 else 255.0
        gray = _scale_to_uint8(values, top)
        return np.repeat(gray[:, :, None], 3, axis=2)
    if mode in ("RGBA", "LA", "PA") or (mode == "P" and "transparency" in image.info):
        # Transparent pixels are composited on white: their stored colour is arbitrary.
        rgba = image.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return np.asarray(Image.alpha_composite(background, rgba).convert("RGB"))
    try:
        return np.asarray(
            image.convert("RGB")
        )  # L, 1, P, CMYK (inverted Adobe JPEGs handled by PIL), YCbCr, LAB, HSV
    except (ValueError, OSError) as exc:
        raise ImageDecodeError(f"{name}: cannot convert image mode {mode} to RGB ({exc})") from exc


_ROWS = 512  # rows scaled at once: float64 temporaries stay at ~8 × 512 × width bytes


def _scale_to_uint8(values: np.ndarray, top: float) -> np.ndarray:
    """round(values × 255 / top) clipped to 0-255, as uint8, a block of rows at a time (a whole
    16-bit 8000² image in float64 would be 512 MB)."""
    if values.dtype == np.uint16 or (
        values.dtype.kind in "iu"
        and top == 65535.0
        and values.min(initial=0) >= 0
        and values.max(initial=0) <= 65535
    ):
        lut = np.clip(np.rint(np.arange(65536, dtype=np.float64) * (255.0 / top)), 0, 255).astype(
            np.uint8
        )
        return lut[values.astype(np.uint16, copy=False)]
    out = np.empty(values.shape, np.uint8)
    for start in range(0, values.shape[0], _ROWS):
        block = values[start : start + _ROWS].astype(np.float64)
        out[start : start + _ROWS] = np.clip(np.rint(block * (255.0 / top)), 0, 255)
    return out


# Bytes per pixel that Pillow holds for an image of each mode (3-band modes are stored in 4).
_PIL_BYTES = {"1": 1, "L": 1, "P": 1, "I;16": 2, "I;16B": 2, "I;16L": 2, "I;16N": 2}


def decode_cost(width: int, height: int, mode: str) -> int:
    """Bytes that turning a `mode` image of width × height into model input holds at its peak:
    Pillow's pixels (and an EXIF-rotated copy), the conversion's intermediates, the H×W×3 uint8
    array and its copy on the JAX device. Services budget decoding with it.

    Calibrated on this path with large 1-bit and 16-bit PNGs: the bytes a pixel counted here stay
    above the peak each of them raised."""
    stored = _PIL_BYTES.get(mode, 4)
    if mode in ("RGBA", "LA", "PA", "P", "RGBa"):
        convert = (
            4 + 4 + 4 + 4
        )  # RGBA copy, white background, composite, RGB (P may be transparent)
    elif mode.startswith("I;16") or mode in ("I", "F"):
        convert = 1  # scaled to 8 bits a block of rows at a time
    elif mode == "RGB":
        convert = 0
    else:
        convert = 4  # convert("RGB")
    return width * height * (2 * stored + convert + 3 + 3)


def header_cost(data: bytes) -> tuple[int, int, int]:
    """(width, height, decode_cost) from an image's header alone, without decoding pixels;
    (0, 0, 0) when the header cannot be read (decoding will then fail on its own)."""
    from PIL import Image

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            old = Image.MAX_IMAGE_PIXELS
            Image.MAX_IMAGE_PIXELS = None  # a size check only; the decoder enforces its own limit
            try:
                image = Image.open(io.BytesIO(data), formats=FORMATS)
                width, height, mode = image.size[0], image.size[1], image.mode
            finally:
                Image.MAX_IMAGE_PIXELS = old
    except Exception:
        return 0, 0, 0
    return width, height, decode_cost(width, height, mode)


def _array_to_rgb(array: np.ndarray, name: str) -> np.ndarray:
    if array.ndim == 2:
        array = array[:, :, None]
    if array.ndim != 3 or array.shape[2] not in (1, 3, 4):
        raise ImageDecodeError(
            f"{name}: arrays must be H×W, H×W×1, H×W×3 or H×W×4, got shape {array.shape}"
        )
    if array.shape[0] < 1 or array.shape[1] < 1:
        raise ImageDecodeError(f"{name}: image has no pixels (shape {array.shape})")
    if array.dtype != np.uint8:
        raise ImageDecodeError(
            f"{name}: arrays must be uint8 (0-255), got {array.dtype}; convert with np.clip(x, 0, 255).astype(np.uint8)"
        )
    if array.shape[2] == 1:
        array = np.repeat(array, 3, axis=2)
    elif array.shape[2] == 4:
        array = array[
            :, :, :3
        ]  # arrays carry no compositing convention; the alpha channel is dropped
    return np.ascontiguousarray(array)


def _jpeg_fast(
    data: bytes, name: str, options: DecodeOptions, orientation: int
) -> np.ndarray | None:
    """simplejpeg decode of RGB/gray JPEGs, optionally at a reduced DCT scale; None -> use PIL."""
    try:
        import simplejpeg
    except ImportError:
        return None
    try:
        height, width, colorspace, _ = simplejpeg.decode_jpeg_header(data)
    except ValueError:
        return None
    if colorspace not in ("RGB", "YCbCr", "Gray"):
        return None  # CMYK/YCCK: PIL knows the Adobe inversion convention
    check_pixels(name, int(width), int(height), options.max_pixels)
    min_h = min_w = 0
    if options.min_size is not None:
        # The decoded image must keep at least margin × target on each side, whatever the rotation.
        need = int(np.ceil(max(options.min_size) * options.reduce_margin))
        min_h = min_w = need
    try:
        array = simplejpeg.decode_jpeg(
            data, colorspace="RGB", min_height=min_h, min_width=min_w, strict=True
        )
    except ValueError:
        return None  # truncated or odd: PIL decides, with its own error message
    if orientation not in (0, 1):
        array = np.ascontiguousarray(apply_orientation(array, orientation))
    return array


def _decode_bytes(data: bytes, name: str, options: DecodeOptions) -> np.ndarray:
    from PIL import Image, ImageOps, UnidentifiedImageError

    if not data:
        raise ImageDecodeError(f"{name}: input is empty (0 bytes)")
    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        old_limit = Image.MAX_IMAGE_PIXELS
        try:
            image = Image.open(io.BytesIO(data), formats=FORMATS)
        except UnidentifiedImageError as exc:
            raise ImageDecodeError(
                f"{name}: not a recognised image file (JPEG, PNG, WebP, BMP, GIF, TIFF)"
            ) from exc
        except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
            raise ImageDecodeError(
                f"{name}: image is too large (possible decompression bomb): {exc}"
            ) from exc
        except (OSError, SyntaxError, ValueError, EOFError) as exc:
            if "truncated" in str(exc).lower() or isinstance(exc, EOFError):
                raise ImageDecodeError(
                    f"{name}: image data is truncated or corrupt ({exc})"
                ) from exc
            raise ImageDecodeError(f"{name}: cannot read image header ({exc})") from exc
        finally:
            Image.MAX_IMAGE_PIXELS = old_limit
    width, height = image.size
    check_pixels(name, width, height, options.max_pixels)
    try:
        orientation = int(image.getexif().get(_EXIF_ORIENTATION, 1) or 1)
    except Exception:  # a broken EXIF block should not cost the image
        orientation = 1
    if (
        options.fast_jpeg
        and image.format == "JPEG"
        and data.startswith(_JPEG_MAGIC)
        and image.mode in ("RGB", "L")
    ):
        fast = _jpeg_fast(data, name, options, orientation)
        if fast is not None:
            return fast
    try:
        image.seek(0)  # GIF/TIFF/WebP animations: the first frame
        image.load()
        if orientation not in (0, 1):
            image = ImageOps.exif_transpose(image)
        return _to_rgb(image, name)
    except ImageDecodeError:
        raise
    except (OSError, SyntaxError, ValueError, EOFError) as exc:
        reason = str(exc) or type(exc).__name__
        if "truncated" in reason.lower() or isinstance(exc, EOFError):
            raise ImageDecodeError(
                f"{name}: image data is truncated or corrupt ({reason})"
            ) from exc
        raise ImageDecodeError(f"{name}: cannot decode image ({reason})") from exc


def decode_image(item: Any, options: DecodeOptions | None = None) -> np.ndarray:
    """Decode one input to a C-contiguous H×W×3 uint8 RGB array, or raise `ImageDecodeError`."""
    options = options or DecodeOptions()
    name = describe_input(item)
    if isinstance(item, np.ndarray):
        array = _array_to_rgb(item, name)
        check_pixels(name, array.shape[1], array.shape[0], options.max_pixels)
        return array
    if isinstance(item, (str, os.PathLike)):
        return _decode_bytes(_read_bytes(Path(item)), name, options)
    if isinstance(
        item, ObjectPath
    ):  # made by the CLI from an s3:// or gs:// URI, never by a client
        return _decode_bytes(_read_object(item), name, options)
    if isinstance(item, (bytes, bytearray, memoryview)):
        return _decode_bytes(bytes(item), name, options)
    try:
        from PIL import Image
    except ImportError:  # pragma: no cover
        Image = None
    if Image is not None and isinstance(item, Image.Image):
        check_pixels(name, item.size[0], item.size[1], options.max_pixels)
        return np.ascontiguousarray(_to_rgb(item, name))
    raise ImageDecodeError(
        f"{name}: unsupported input type; give a path, bytes, a PIL image or an H×W×3 uint8 array"
    )
