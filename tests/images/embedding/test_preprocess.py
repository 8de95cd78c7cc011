import logging

import numpy as np
import pytest
from PIL import Image

from accelkit.errors import ConfigError
from accelkit.images.embedding.decode import ImageDecodeError
from accelkit.images.embedding.preprocess import (
    HostImagePreprocessor,
    JAXImagePreprocessor,
    pil_reference,
    plan_image,
)
from tests.support.photos import encode

MEAN = np.array([0.485, 0.456, 0.406])
STD = np.array([0.229, 0.224, 0.225])
# (height, width): down- and upscaling, extreme aspect ratios, odd sizes, PIL's vertical-first rule.
SIZES = [
    (1, 1),
    (2, 3),
    (17, 5),
    (224, 224),
    (300, 500),
    (500, 300),
    (600, 80),
    (80, 600),
    (999, 1000),
    (37, 501),
    (5, 900),
    (223, 225),
    (448, 448),
    (100, 100),
    (301, 300),
    (1411, 700),
]


@pytest.fixture(scope="module")
def inputs(photos):
    rng = np.random.default_rng(7)
    out = []
    sources = [photos["astronaut"], photos["retina"], photos["china"], photos["coins"]]
    for i, (h, w) in enumerate(SIZES):
        src = sources[i % len(sources)]
        if h <= src.shape[0] and w <= src.shape[1]:
            y, x = rng.integers(0, src.shape[0] - h + 1), rng.integers(0, src.shape[1] - w + 1)
            out.append(np.ascontiguousarray(src[y : y + h, x : x + w]))
        else:
            out.append(np.asarray(Image.fromarray(src).resize((w, h))))
    out.append(
        rng.integers(0, 256, (333, 257, 3), dtype=np.uint8)
    )  # noise: worst case for rounding
    return out


@pytest.fixture(scope="module")
def preprocessors():
    # reducing_gap=None: no host-side box reduction, so the result must be PIL's plain resize.
    return {
        fit: JAXImagePreprocessor(fit=fit, cache_compiled=False, batch_size=8, reducing_gap=None)
        for fit in ("stretch", "center-crop", "letterbox")
    }


def to_uint8_space(batch_nchw):
    return (np.asarray(batch_nchw, np.float64).transpose(0, 2, 3, 1) * STD + MEAN) * 255.0


@pytest.mark.parametrize("fit", ["stretch", "center-crop", "letterbox"])
def test_matches_pil_bilinear_within_one_level(preprocessors, inputs, fit):
    out = to_uint8_space(preprocessors[fit].preprocess_batch(inputs))
    assert out.shape == (len(inputs), 224, 224, 3)
    mismatched = 0
    for image, got in zip(inputs, out, strict=True):
        reference, mask = pil_reference(image, (224, 224), fit)
        diff = np.abs(got - reference)[mask]
        assert diff.max() <= 1.0 + 1e-3, (image.shape, fit, diff.max())
        mismatched += int((diff > 0.5).sum())
        # padding (letterbox only) is exactly 0 after normalization, i.e. the mean colour
        assert np.allclose(got[~mask], MEAN * 255.0, atol=1e-3)
    assert (
        mismatched / out[..., 0].size < 1e-4
    )  # in practice bit-exact: PIL's fixed-point arithmetic is replicated


def test_fit_geometry(preprocessors):
    wide = np.full((100, 400, 3), 200, np.uint8)
    _, mask = pil_reference(wide, (224, 224), "letterbox")
    rows = np.flatnonzero(mask.any(axis=1))
    assert mask.all(axis=0).all() is np.False_ or mask[:, 0].any()
    assert (
        rows.size == 56 and rows[0] == 84
    )  # 400x100 -> 224x56, centred: letterbox keeps everything
    out = to_uint8_space(preprocessors["letterbox"].preprocess_batch([wide]))[0]
    assert np.allclose(
        out[rows], 200, atol=1e-3
    )  # content is not zeroed (EmbeddingTrident's defect)
    # center-crop of a wide image drops the sides: a red left edge disappears, a green centre fills
    img = np.zeros((100, 400, 3), np.uint8)
    img[:, :100] = (255, 0, 0)
    img[:, 100:] = (0, 255, 0)
    crop = to_uint8_space(preprocessors["center-crop"].preprocess_batch([img]))[0]
    assert np.allclose(crop[..., 1], 255, atol=1e-3) and np.allclose(crop[..., 0], 0, atol=1e-3)
    stretch = to_uint8_space(preprocessors["stretch"].preprocess_batch([img]))[0]
    assert stretch[:, :50, 0].min() > 250  # stretch keeps the red quarter


def test_reducing_gap_on_huge_photos(photos):
    big = np.asarray(
        Image.fromarray(photos["retina"]).resize((2100, 1900), Image.Resampling.BILINEAR)
    )
    pp = JAXImagePreprocessor(cache_compiled=False, batch_size=2)  # default reducing_gap=3
    plan = plan_image(big, (224, 224), "stretch", 3.0)
    assert plan.pixels.shape[:2] == (950, 700)  # scales 8.5 and 9.4 -> factors 2 and 3
    got = to_uint8_space(pp.preprocess_batch([big]))[0]
    # exactly PIL's reduce (box average) followed by PIL's resize
    composed = np.asarray(
        Image.fromarray(big).reduce((3, 2)).resize((224, 224), Image.Resampling.BILINEAR)
    )
    assert np.abs(got - composed).max() <= 1.0 + 1e-3
    # and close to a plain full-resolution PIL resize (what reducing_gap trades away)
    plain = np.asarray(Image.fromarray(big).resize((224, 224), Image.Resampling.BILINEAR))
    assert np.abs(got - plain).mean() < 1.5
    assert (
        pp.group_limit((8192, 8192, 4, 4, False)) == 1
        and pp.group_limit((512, 512, 8, 8, False)) == 2
    )


def test_layouts_and_dtypes(inputs):
    nchw = JAXImagePreprocessor(cache_compiled=False, batch_size=4)
    nhwc = JAXImagePreprocessor(cache_compiled=False, batch_size=4, data_format="NHWC")
    bf16 = JAXImagePreprocessor(cache_compiled=False, batch_size=4, dtype="bfloat16")
    a = np.asarray(nchw.preprocess_batch(inputs[:5]))
    b = np.asarray(nhwc.preprocess_batch(inputs[:5]))
    c = bf16.preprocess_batch(inputs[:5])
    assert a.shape == (5, 3, 224, 224) and b.shape == (5, 224, 224, 3)
    assert np.array_equal(a.transpose(0, 2, 3, 1), b)
    assert str(c.dtype) == "bfloat16"
    assert (
        np.abs(np.asarray(c, np.float32) - a).max() <= 2.7 * 2.0**-8
    )  # bf16 rounding of |x| <= 2.7


def test_mixed_input_kinds(tmp_path, photos):
    photo = photos["chelsea"]
    path = tmp_path / "cat.png"
    path.write_bytes(encode(photo, "PNG"))
    pp = JAXImagePreprocessor(cache_compiled=False, batch_size=4)
    out = np.asarray(
        pp.preprocess_batch([str(path), path.read_bytes(), Image.fromarray(photo), photo, path])
    )
    for row in out[1:]:
        assert np.array_equal(row, out[0])
    assert pp.device.platform == "cpu"


def test_bad_items_fail_alone(tmp_path, photos):
    pp = JAXImagePreprocessor(cache_compiled=False, batch_size=4)
    tall = np.zeros((20000, 100, 3), np.uint8)
    tall[:10000] = 255
    result = pp.preprocess(
        [
            photos["coffee"],
            str(tmp_path / "nope.jpg"),
            b"",
            np.zeros((1, 1, 3), np.uint8),
            tall,
            b"GIF89a junk",
        ]
    )
    assert result.indices == [0, 3, 4]
    assert sorted(result.failures) == [1, 2, 5]
    assert "no such file" in str(result.failures[1]) and "empty" in str(result.failures[2])
    tall_row = to_uint8_space(np.asarray(result.array)[2:3])[0]
    assert (
        tall_row[:100].min() > 254 and tall_row[-100:].max() < 1
    )  # top white, bottom black survives the host reduce
    with pytest.raises(ImageDecodeError, match=r"nope\.jpg"):
        pp.preprocess_batch([photos["coffee"], str(tmp_path / "nope.jpg")])


def test_compile_count_bounded_over_many_sizes(photos):
    pp = JAXImagePreprocessor(cache_compiled=False, batch_size=4)
    rng = np.random.default_rng(3)
    sizes = [(int(h), int(w)) for h, w in rng.integers(390, 512, (12, 2))]
    assert len(set(sizes)) >= 10
    images = [np.ascontiguousarray(photos["astronaut"][:h, :w]) for h, w in sizes]
    pp.preprocess_batch(images)
    keys = {plan_image(im, (224, 224), "stretch").key for im in images}
    first = pp.compile_count
    assert first <= len(keys) * len(pp.batch_sizes) and first < len(sizes)
    more = [(int(h), int(w)) for h, w in rng.integers(390, 512, (12, 2))]
    pp.preprocess_batch([np.ascontiguousarray(photos["astronaut"][:h, :w]) for h, w in more])
    assert pp.compile_count <= len(keys) * len(
        pp.batch_sizes
    )  # new sizes, same buckets: nothing or little new
    assert all(len(shape) == 6 for shape in pp.compiled_shapes)


def test_gpu_request_falls_back_to_cpu_with_one_warning(monkeypatch, caplog):
    import accelkit.runtime.devices as devices

    monkeypatch.setattr(devices, "_warned", set())
    with caplog.at_level(logging.WARNING):
        a = JAXImagePreprocessor(platform="gpu", cache_compiled=False)
        b = JAXImagePreprocessor(platform="cuda", cache_compiled=False)
    assert a.device.platform == b.device.platform == "cpu"
    assert a.platform_choice.fell_back and a.platform_choice.requested == "gpu"
    assert sum("falling back to CPU" in r.message for r in caplog.records) == 1
    monkeypatch.setenv("JAX_USE_GPU", "1")
    explicit = JAXImagePreprocessor(platform="cpu", cache_compiled=False)
    assert not explicit.platform_choice.fell_back  # the argument beats the environment
    assert (
        JAXImagePreprocessor(cache_compiled=False).platform_choice.source
        == "environment JAX_USE_GPU"
    )
    monkeypatch.setenv("JAX_PLATFORM", "cpu")
    assert (
        JAXImagePreprocessor(cache_compiled=False).platform_choice.source
        == "environment JAX_PLATFORM"
    )


def test_cache_compiled_warms_up_and_writes_the_persistent_cache(tmp_path):
    # A fresh process: JAX reads the cache setting when it first compiles.
    import subprocess
    import sys

    code = (
        "from accelkit.images.embedding.preprocess import JAXImagePreprocessor as P;"
        f"p = P(cache_compiled=True, cache_dir={str(tmp_path / 'jax')!r}, batch_size=2);"
        "print(p.compile_count, p.cache_dir)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**__import__("os").environ, "JAX_PLATFORMS": "cpu"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", str(tmp_path / "jax")]
    assert any((tmp_path / "jax").iterdir())


def test_config_errors():
    from accelkit.errors import ConfigError

    for kwargs in (
        {"fit": "zoom"},
        {"data_format": "CHW"},
        {"dtype": "float16"},
        {"image_size": 0},
        {"std": (0, 1, 1)},
    ):
        with pytest.raises(ConfigError):
            JAXImagePreprocessor(cache_compiled=False, **kwargs)


# --------------------------------------------------------------------------- the host engine


def float64_reference(image, fit, size=(224, 224), data_format="NCHW", resample="bilinear"):
    """PIL's pixels, normalized in float64 and rounded once: what the host engine promises."""
    pixels, mask = pil_reference(image, size, fit, resample)
    out = ((pixels / 255.0 - MEAN) / STD).astype(np.float32)
    out[~mask] = 0.0
    return out.transpose(2, 0, 1) if data_format == "NCHW" else out


@pytest.mark.parametrize("fit", ["stretch", "center-crop", "letterbox"])
def test_host_engine_is_pils_pixels_normalized_exactly(preprocessors, inputs, fit):
    host = HostImagePreprocessor(fit=fit, batch_size=8, reducing_gap=None)
    got = host.preprocess_batch(inputs)
    assert isinstance(got, np.ndarray) and got.dtype == np.float32 and host.device is None
    for image, row in zip(inputs, got, strict=True):
        assert np.array_equal(row, float64_reference(image, fit)), image.shape
    # the JAX engine computes the same pixels; its float32 normalization differs by an ulp or two
    jax_rows = np.asarray(preprocessors[fit].preprocess_batch(inputs))
    assert np.abs(jax_rows - got).max() <= 5e-7
    assert np.array_equal(np.rint(to_uint8_space(jax_rows)), np.rint(to_uint8_space(got)))
    assert host.compile_count == 0


@pytest.mark.parametrize("size", [(214, 320), (427, 640), (320, 214), (333, 500), (97, 61)])
@pytest.mark.parametrize("target", [64, (64, 48), 224])
def test_center_crop_boxes_never_leave_the_image(size, target):
    """A float scale once made a 214-row crop of 214.00000000000003 rows: a box starting at
    -1.4e-14, which PIL refuses, so the host engine failed such photos (a 427x640 photo reduced
    by 2 to 214x320, center-cropped to 64x64)."""
    from accelkit.images.embedding.resample import fit_geometry

    height, width = size
    out = (target, target) if isinstance(target, int) else target
    (y0, y1, *_), (x0, x1, *_) = fit_geometry(height, width, *out, "center-crop")
    assert 0 <= y0 <= y1 <= height and 0 <= x0 <= x1 <= width
    assert (y0, y1) == (0.0, height) or (x0, x1) == (0.0, width)  # the binding side is whole
    image = np.random.default_rng(0).integers(0, 256, (height, width, 3), np.uint8)
    host = HostImagePreprocessor(image_size=out, fit="center-crop", reducing_gap=None)
    assert np.array_equal(
        host.preprocess_batch([image])[0], float64_reference(image, "center-crop", out)
    )


def test_host_engine_reduces_huge_photos_like_the_jax_engine(photos):
    big = np.asarray(
        Image.fromarray(photos["retina"]).resize((2100, 1900), Image.Resampling.BILINEAR)
    )
    host = HostImagePreprocessor(batch_size=2)  # default reducing_gap=3
    composed = np.asarray(Image.fromarray(big).reduce((3, 2)))  # PIL's reduce, then its resize
    assert np.array_equal(host.preprocess_batch([big])[0], float64_reference(composed, "stretch"))


def test_host_engine_layouts_dtypes_order_and_bad_items(tmp_path, inputs, photos):
    nchw = HostImagePreprocessor(batch_size=3)
    nhwc = HostImagePreprocessor(batch_size=3, data_format="NHWC")
    bf16 = HostImagePreprocessor(batch_size=3, dtype="bfloat16")
    a, b, c = (pp.preprocess_batch(inputs[:7]) for pp in (nchw, nhwc, bf16))
    assert a.shape == (7, 3, 224, 224) and b.shape == (7, 224, 224, 3)
    assert np.array_equal(a.transpose(0, 2, 3, 1), b)
    assert str(c.dtype) == "bfloat16" and np.abs(c.astype(np.float32) - a).max() <= 2.7 * 2.0**-8
    # several groups of 3, decoded in a pool: rows still in input order
    for i, image in enumerate(inputs[:7]):
        assert np.array_equal(a[i], float64_reference(image, "stretch")), i
    result = nchw.preprocess(
        [photos["coffee"], str(tmp_path / "nope.jpg"), b"", np.zeros((1, 1, 3), np.uint8)]
    )
    assert result.indices == [0, 3] and sorted(result.failures) == [1, 2]
    assert "no such file" in str(result.failures[1]) and "empty" in str(result.failures[2])
    assert nchw.preprocess([]).array.shape == (0, 3, 224, 224)
    with pytest.raises(ImageDecodeError, match=r"nope\.jpg"):
        nchw.preprocess_batch([photos["coffee"], str(tmp_path / "nope.jpg")])


def test_auto_engine_resizes_on_the_host_without_starting_jax(tmp_path):
    """Here no JAX accelerator plugin is installed: `auto` picks the host and the process never
    imports JAX; `jax` and an accelerator asked for by name go to the JAX engine."""
    import subprocess
    import sys

    script = (
        "import sys\n"
        "from accelkit.images.embedding.preprocess import make_preprocessor\n"
        "pp = make_preprocessor('auto', batch_size=2)\n"
        "import numpy as np\n"
        "out = pp.preprocess_batch([np.zeros((50, 60, 3), np.uint8)])\n"
        "print(type(pp).__name__, out.shape, 'jax' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert done.stdout.split() == ["HostImagePreprocessor", "(1,", "3,", "224,", "224)", "False"], (
        done.stdout + done.stderr
    )
    from accelkit.images.embedding.preprocess import make_preprocessor

    assert type(make_preprocessor("jax", cache_compiled=False)) is JAXImagePreprocessor
    asked = make_preprocessor("auto", platform="gpu", cache_compiled=False)  # JAX decides
    assert type(asked) is JAXImagePreprocessor and asked.device.platform == "cpu"
    with pytest.raises(ConfigError, match="engine='gpu' must be one of auto, jax, host"):
        make_preprocessor("gpu")


# --------------------------------------------------------------------------- bicubic (CLIP, SigLIP)

FITS = ["stretch", "center-crop", "shortest-edge-crop", "letterbox"]
# beyond SIZES: one-pixel rows and columns, a 62x downscale (bicubic's widest taps that the
# ladder holds without a reduce), thin upscales
BICUBIC_SIZES = [(1, 300), (300, 1), (4000, 60), (3, 101), (64, 2900)]


@pytest.fixture(scope="module")
def bicubic_inputs(inputs):
    rng = np.random.default_rng(11)
    return inputs + [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in BICUBIC_SIZES]


@pytest.mark.parametrize(
    ("fit", "size"), zip(FITS, [(64, 48), (224, 224), (64, 48), (224, 224)], strict=True)
)
def test_bicubic_is_pils_bit_for_bit_on_both_engines(bicubic_inputs, fit, size):
    """PIL's BICUBIC (`Image.resize(BICUBIC, box=…)`, then the fit's crop or padding) to the
    level, on the JAX engine's device passes and the host engine: down- and upscales, 1×N,
    a 62× downscale, odd sizes, noise, every fit."""
    kwargs = {"image_size": size, "fit": fit, "resample": "bicubic", "reducing_gap": None}
    jax_rows = np.asarray(
        JAXImagePreprocessor(cache_compiled=False, batch_size=8, **kwargs).preprocess_batch(
            bicubic_inputs
        )
    )
    host_rows = HostImagePreprocessor(batch_size=8, **kwargs).preprocess_batch(bicubic_inputs)
    for image, got, host in zip(bicubic_inputs, jax_rows, host_rows, strict=True):
        reference, mask = pil_reference(image, size, fit, "bicubic")
        levels = np.rint((got.transpose(1, 2, 0).astype(np.float64) * STD + MEAN) * 255.0)
        assert np.array_equal(levels[mask], reference[mask]), (image.shape, fit, size)
        assert np.array_equal(host, float64_reference(image, fit, size, resample="bicubic"))
    if fit == "stretch":  # the reference itself, in the plainest PIL call there is
        image = bicubic_inputs[4]
        plain = Image.fromarray(image).resize(size[::-1], Image.Resampling.BICUBIC)
        assert np.array_equal(pil_reference(image, size, fit, "bicubic")[0], np.asarray(plain))


def test_clip_and_siglip_geometry_are_transformers_processors(bicubic_inputs, side=64):
    """fit shortest-edge-crop with bicubic is transformers' CLIPImageProcessor (short side to
    `side`, long side int(side × long / short), centre crop from (resized − side) // 2), stretch
    with bicubic its SiglipImageProcessor: the processors' own float32 pixels."""
    transformers = pytest.importorskip("transformers")
    pil_class = getattr(transformers, "CLIPImageProcessorPil", None)
    clip_class = pil_class or transformers.CLIPImageProcessor
    siglip_class = (
        getattr(transformers, "SiglipImageProcessorPil", None) or transformers.SiglipImageProcessor
    )
    clip = clip_class(size={"shortest_edge": side}, crop_size={"height": side, "width": side})
    siglip = siglip_class(size={"height": side, "width": side})
    # every third input (fewer compiled shapes); 1-px sides: see below
    images = [im for im in bicubic_inputs[::3] if min(im.shape[:2]) > 1]
    for processor, fit in ((clip, "shortest-edge-crop"), (siglip, "stretch")):
        want = processor(images=images, return_tensors="np", input_data_format="channels_last")
        want = np.asarray(want["pixel_values"], np.float32)
        kwargs = {"image_size": side, "fit": fit, "resample": "bicubic", "reducing_gap": None,
                  "mean": processor.image_mean, "std": processor.image_std}  # fmt: skip
        # the host engine here; the JAX engine's pixels equal the same PIL calls bit for bit
        # (test_bicubic_is_pils_bit_for_bit_on_both_engines), the processor's by transitivity
        got = HostImagePreprocessor(batch_size=8, **kwargs).preprocess_batch(images)
        assert np.abs(got - want).max() <= 1e-6, fit
    # a 1-pixel side: the processor's own geometry still, its channel guess aside
    line = bicubic_inputs[-len(BICUBIC_SIZES)]
    want = clip(images=[line], return_tensors="np", input_data_format="channels_last")
    host = HostImagePreprocessor(image_size=side, fit="shortest-edge-crop", resample="bicubic",
                                 reducing_gap=None, mean=clip.image_mean, std=clip.image_std)  # fmt: skip
    assert np.abs(host.preprocess_batch([line]) - want["pixel_values"]).max() <= 1e-6


def test_bicubic_downscales_past_the_tap_ladder_reduce_first_on_jax():
    """A 2000-pixel row to 8 pixels would need ~1000 bicubic taps per output: the JAX engine
    box-reduces that side first (PIL's reduce, then PIL's bicubic resize), bounded compiled
    shapes; the host engine stays PIL's plain resize."""
    image = np.random.default_rng(5).integers(0, 256, (3, 2000, 3), np.uint8)
    plan = plan_image(image, (3, 8), "stretch", None, "bicubic")
    assert plan.pixels.shape[:2] == (3, 400) and plan.key[3] <= 256
    pp = JAXImagePreprocessor(image_size=(3, 8), resample="bicubic", reducing_gap=None,
                              cache_compiled=False, mean=(0, 0, 0), std=(1, 1, 1))  # fmt: skip
    got = np.rint(np.asarray(pp.preprocess_batch([image]))[0].transpose(1, 2, 0) * 255.0)
    composed = Image.fromarray(image).reduce((5, 1)).resize((8, 3), Image.Resampling.BICUBIC)
    assert np.array_equal(got, np.asarray(composed))
    host = HostImagePreprocessor(image_size=(3, 8), resample="bicubic", reducing_gap=None,
                                 mean=(0, 0, 0), std=(1, 1, 1))  # fmt: skip
    plain = Image.fromarray(image).resize((8, 3), Image.Resampling.BICUBIC)
    assert np.array_equal(np.rint(host.preprocess_batch([image])[0].transpose(1, 2, 0) * 255.0),
                          np.asarray(plain))  # fmt: skip


def test_resample_is_checked_and_bilinear_stays_the_default():
    # checked once, by PreprocessConfig, whose error names the setting and the allowed values
    with pytest.raises(
        ConfigError, match="resample='lanczos': Input should be 'bilinear' or 'bicubic'"
    ):
        HostImagePreprocessor(resample="lanczos")
    assert HostImagePreprocessor().resample == "bilinear"
    image = np.random.default_rng(2).integers(0, 256, (97, 61, 3), np.uint8)
    bilinear = Image.fromarray(image).resize((224, 224), Image.Resampling.BILINEAR)
    assert np.array_equal(pil_reference(image, (224, 224), "stretch")[0], np.asarray(bilinear))


def test_bicubic_after_the_default_reduce_is_the_same_on_both_engines(photos):
    """reducing_gap 3 (the default) with bicubic: PIL's reduce then PIL's bicubic resize, the
    JAX engine's levels equal to the host engine's."""
    big = np.asarray(Image.fromarray(photos["retina"]).resize((2100, 1900)))
    kwargs = {"resample": "bicubic", "fit": "center-crop"}
    host = HostImagePreprocessor(**kwargs).preprocess_batch([big])
    jax_rows = np.asarray(
        JAXImagePreprocessor(cache_compiled=False, **kwargs).preprocess_batch([big])
    )
    composed = Image.fromarray(big).reduce(2)  # the centred 1900² box: scale 8.5 -> factor 2
    reference, _ = pil_reference(np.asarray(composed), (224, 224), "center-crop", "bicubic")
    assert np.array_equal(np.rint(to_uint8_space(host))[0], reference)
    assert np.array_equal(np.rint(to_uint8_space(jax_rows))[0], reference)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("data_format", ["NCHW", "NHWC"])
def test_the_normalize_table_is_the_float64_formula_for_every_value(dtype, data_format):
    """The host engine normalizes by a [3, 256] table (one lookup per value) instead of float64
    arithmetic on each pixel: every uint8 value of every channel, and the mask, give the numbers
    of the formula rounded once, in both layouts and both dtypes."""
    from accelkit.images.embedding.preprocess import _host_dtype
    from accelkit.images.embedding.resample import lookup_normalize, normalize_table

    numpy_dtype = _host_dtype(dtype)
    table = normalize_table(MEAN, STD, numpy_dtype)
    values = np.stack([(np.arange(256) + 85 * c) % 256 for c in range(3)], -1)  # 256 each
    pixels = np.ascontiguousarray(np.tile(values[:, None, :], (1, 5, 1)).astype(np.uint8))
    inside = np.ones(pixels.shape[:2], bool)
    inside[:7, 2] = False  # a letterbox's bars
    expected = ((pixels / 255.0 - MEAN) / STD).astype(np.float32)
    expected[~inside] = 0.0
    expected = expected.astype(numpy_dtype)
    got = lookup_normalize(pixels, inside, table, data_format)
    assert got.dtype == numpy_dtype and got.flags.c_contiguous
    layout = expected.transpose(2, 0, 1) if data_format == "NCHW" else expected
    assert np.array_equal(got.view(np.uint8), np.ascontiguousarray(layout).view(np.uint8))
