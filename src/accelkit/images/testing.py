"""Real photographs that ship inside installed packages — scikit-image's data set and
scikit-learn's two sample images — for the tests, the benchmarks and examples: nothing downloaded.

`photos()` returns them by name as contiguous RGB uint8 arrays (greyscale ones repeated to three
channels), plus crops that give odd sizes and aspect ratios; `altered(photo)` a copy changed as a
photo is by sharing (smaller, brighter, JPEG quality 40); `family(name)` a crop's source photo.
"""

from __future__ import annotations

import numpy as np

from accelkit.errors import require

SKIMAGE_NAMES = (
    "astronaut",
    "camera",
    "chelsea",
    "coffee",
    "coins",
    "hubble_deep_field",
    "immunohistochemistry",
    "moon",
    "retina",
    "rocket",
    "page",
    "text",
    "clock",
    "brick",
    "grass",
)
# name -> (source photo, rows, columns)
CROPS = {
    "astronaut_face": ("astronaut", slice(20, 220), slice(140, 340)),
    "china_left": ("china", slice(None), slice(None, 320)),
    "flower_center": ("flower", slice(100, 350), slice(150, 500)),
    "coffee_cup": ("coffee", slice(50, 350), slice(100, 450)),
    "rocket_top": ("rocket", slice(None, 220), slice(200, 500)),
    "retina_crop": ("retina", slice(300, 900), slice(300, 900)),
    "motorcycle_crop": ("motorcycle", slice(100, 400), slice(200, 600)),
}


def _rgb(array: np.ndarray) -> np.ndarray:
    if array.ndim == 2:
        return np.repeat(array[:, :, None], 3, axis=2)
    return np.ascontiguousarray(array[:, :, :3])


def photos(crops: bool = True) -> dict[str, np.ndarray]:
    """Every photo by name (and, with `crops`, the crops in CROPS)."""
    data = require("skimage.data", "test")
    load_sample_images = require("sklearn.datasets", "test").load_sample_images
    out = {name: _rgb(getattr(data, name)()) for name in SKIMAGE_NAMES}
    out["motorcycle"] = _rgb(data.stereo_motorcycle()[0])
    out["china"], out["flower"] = (_rgb(a) for a in load_sample_images().images)
    if crops:
        for name, (source, rows, cols) in CROPS.items():
            out[name] = np.ascontiguousarray(out[source][rows, cols])
    return out


def altered(photo: np.ndarray) -> bytes:
    """Rescaled to 70 %, brightness +10 %, re-encoded as JPEG at quality 40."""
    import io

    from PIL import Image, ImageEnhance

    image = Image.fromarray(photo)
    image = image.resize(
        (max(1, int(image.width * 0.7)), max(1, int(image.height * 0.7))), Image.Resampling.BILINEAR
    )
    image = ImageEnhance.Brightness(image).enhance(1.1)
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=40)
    return buffer.getvalue()


def family(name: str) -> str:
    """The photo a name shows: a crop's source, else the name itself."""
    return CROPS[name][0] if name in CROPS else name
