import io

import numpy as np
import pytest
from PIL import Image, ImageOps

from accelkit.images.embedding.decode import (
    DecodeOptions,
    ImageDecodeError,
    apply_orientation,
    decode_image,
)
from tests.support.photos import encode


@pytest.fixture(scope="module")
def smooth():
    # A smooth real photo crop: lossless formats must round-trip exactly.
    import skimage.data as data

    return np.ascontiguousarray(data.astronaut()[100:260, 150:370])


@pytest.mark.parametrize("fmt", ["PNG", "BMP", "TIFF", "WEBP"])
def test_lossless_formats_round_trip(smooth, fmt):
    kwargs = {"lossless": True} if fmt == "WEBP" else {}
    assert np.array_equal(decode_image(encode(smooth, fmt, **kwargs)), smooth)


def test_jpeg_fast_path_matches_pil(smooth):
    data = encode(smooth, "JPEG", quality=90)
    fast = decode_image(data, DecodeOptions(fast_jpeg=True))
    slow = decode_image(data, DecodeOptions(fast_jpeg=False))
    reference = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
    assert fast.shape == slow.shape == smooth.shape
    assert np.array_equal(slow, reference)
    assert (
        np.abs(fast.astype(int) - reference).max() <= 2
    )  # both libjpeg-turbo; upsampling may differ by rounding


def test_jpeg_reduced_size_decode_keeps_margin():
    big = np.asarray(Image.fromarray(np.zeros((10, 10, 3), np.uint8)).resize((2000, 1600)))
    data = encode(big, "JPEG")
    out = decode_image(data, DecodeOptions(min_size=(224, 224), reduce_margin=2.0))
    assert min(out.shape[:2]) >= 448 and out.shape[0] < 1600
    assert decode_image(data).shape == (1600, 2000, 3)


def test_gif_first_frame():
    frames = [Image.new("RGB", (20, 10), color) for color in ((255, 0, 0), (0, 0, 255))]
    buffer = io.BytesIO()
    frames[0].save(buffer, format="GIF", save_all=True, append_images=frames[1:])
    out = decode_image(buffer.getvalue())
    assert out.shape == (10, 20, 3) and tuple(out[5, 5]) == (255, 0, 0)


@pytest.mark.parametrize("fmt", ["PNG", "JPEG"])
@pytest.mark.parametrize("orientation", range(1, 9))
def test_exif_orientation_matches_pil(smooth, fmt, orientation):
    image = Image.fromarray(smooth[:50, :70])
    exif = image.getexif()
    exif[0x0112] = orientation
    buffer = io.BytesIO()
    image.save(buffer, format=fmt, exif=exif, **({"quality": 95} if fmt == "JPEG" else {}))
    reference = np.asarray(
        ImageOps.exif_transpose(Image.open(io.BytesIO(buffer.getvalue()))).convert("RGB")
    )
    out = decode_image(buffer.getvalue())
    assert out.shape == reference.shape
    assert np.abs(out.astype(int) - reference).max() <= (0 if fmt == "PNG" else 2)
    assert np.array_equal(
        apply_orientation(np.asarray(image), orientation),
        np.asarray(ImageOps.exif_transpose(_with_orientation(image, orientation))),
    )


def _with_orientation(image, orientation):
    exif = image.getexif()
    exif[0x0112] = orientation
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", exif=exif)
    return Image.open(io.BytesIO(buffer.getvalue()))


def test_modes_convert_to_rgb(smooth):
    gray = smooth[:, :, 0]
    assert np.array_equal(
        decode_image(Image.fromarray(gray)), np.repeat(gray[:, :, None], 3, axis=2)
    )
    palette = Image.fromarray(smooth).quantize(64)
    assert np.array_equal(decode_image(_png(palette)), np.asarray(palette.convert("RGB")))
    rgba = np.dstack([smooth, np.full(smooth.shape[:2], 255, np.uint8)])
    rgba[0, 0, 3] = 0  # fully transparent pixel composites onto white
    out = decode_image(_png(Image.fromarray(rgba, "RGBA")))
    assert tuple(out[0, 0]) == (255, 255, 255) and np.array_equal(out[1:, 1:], smooth[1:, 1:])
    la = Image.fromarray(np.dstack([gray, np.full(gray.shape, 255, np.uint8)]), "LA")
    assert np.array_equal(decode_image(_png(la))[:, :, 1], gray)
    cmyk = Image.fromarray(smooth).convert("CMYK")
    buffer = io.BytesIO()
    cmyk.save(buffer, format="JPEG", quality=95)
    reference = np.asarray(Image.open(io.BytesIO(buffer.getvalue())).convert("RGB"))
    assert np.array_equal(decode_image(buffer.getvalue()), reference)
    assert np.abs(reference.astype(int) - smooth).mean() < 8  # and that reference is the photo


def _png(image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def test_16_bit_is_scaled_not_clipped():
    values = np.array([[0, 257, 32768, 65535]], np.uint16)
    out = decode_image(_png(Image.fromarray(values)))  # PIL stores uint16 as mode I;16
    assert Image.open(io.BytesIO(_png(Image.fromarray(values)))).mode.startswith("I")
    assert out[0, :, 0].tolist() == [0, 1, 128, 255]


def test_bad_inputs_fail_with_reasons(tmp_path, smooth):
    empty = tmp_path / "empty.jpg"
    empty.write_bytes(b"")
    text = tmp_path / "notes.jpg"
    text.write_text("not an image")
    truncated = tmp_path / "cut.jpg"
    truncated.write_bytes(encode(smooth, "JPEG")[:400])  # cut inside the header
    cut_data = tmp_path / "cut_data.jpg"
    full = encode(smooth, "JPEG")
    cut_data.write_bytes(full[: len(full) * 3 // 4])  # header intact, scan data cut
    cases = {
        tmp_path / "missing.jpg": "no such file",
        empty: "empty",
        text: "not a recognised image",
        truncated: "truncated",
        cut_data: "truncated",
        tmp_path: "folder",
    }
    for path, words in cases.items():
        with pytest.raises(ImageDecodeError, match=words) as info:
            decode_image(path)
        assert str(path) in str(info.value)
    with pytest.raises(ImageDecodeError, match="uint8"):
        decode_image(np.zeros((4, 4, 3), np.float32))
    with pytest.raises(ImageDecodeError, match="unsupported input"):
        decode_image(42)


def test_decompression_bomb_is_stopped_before_decoding():
    bomb = _png(Image.new("1", (5000, 4000)))  # tiny file, 20 M pixels
    assert len(bomb) < 100_000
    with pytest.raises(ImageDecodeError, match="exceeds the limit"):
        decode_image(bomb, DecodeOptions(max_pixels=10_000_000))
    with pytest.raises(ImageDecodeError, match="exceeds the limit"):
        decode_image(
            encode(np.zeros((400, 300, 3), np.uint8), "JPEG"), DecodeOptions(max_pixels=100_000)
        )
