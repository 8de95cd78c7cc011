"""The shipped evaluation and calibration text, generated deterministically (no download).

Origin: written for accelkit. The evaluation set is 300 paraphrase pairs (600 sentences) built from
fixed word lists by a seeded `random.Random(20240605)`: each pair states the same event twice with
synonyms swapped and the clause order changed, so FP32 MiniLM ranks the partner first for most
queries. The calibration set is separate text: 128 sentences from a different template family
(instructions and descriptions, seed 7), sharing no template with the evaluation set.

For vision towers, `generated_images` draws scenes (a sky-to-ground gradient, a few filled
shapes, shading and sensor noise) from a seed: calibration and evaluation images from different
seeds, so no image is in both.
"""

from __future__ import annotations

import random

import numpy as np

_PEOPLE = [
    ("the chef", "the cook"),
    ("a child", "a young kid"),
    ("the doctor", "the physician"),
    ("my neighbour", "the person next door"),
    ("the pilot", "the aviator"),
    ("a student", "a pupil"),
    ("the farmer", "the grower"),
    ("an old man", "an elderly gentleman"),
    ("the teacher", "the instructor"),
    ("a tourist", "a traveller"),
    ("the robot", "the machine"),
    ("the driver", "the motorist"),
]
_ACTIONS = [
    ("bought", "purchased"),
    ("repaired", "fixed"),
    ("painted", "coloured"),
    ("lost", "misplaced"),
    ("found", "discovered"),
    ("carried", "transported"),
    ("cleaned", "washed"),
    ("sold", "traded away"),
    ("opened", "unlocked"),
    ("broke", "damaged"),
    ("picked up", "lifted"),
    ("hid", "concealed"),
]
_THINGS = [
    ("a red bicycle", "a crimson bike"),
    ("the wooden table", "the timber desk"),
    ("an old camera", "a vintage camera"),
    ("the blue door", "the azure entrance"),
    ("a heavy box", "a weighty crate"),
    ("the small boat", "the little vessel"),
    ("a silver watch", "a steel wristwatch"),
    ("the kitchen window", "the window of the kitchen"),
    ("a leather bag", "a hide satchel"),
    ("the garden gate", "the yard gate"),
    ("a paper map", "a printed chart"),
    ("the coffee machine", "the espresso maker"),
]
_PLACES = [
    ("in the morning", "early in the day"),
    ("at the market", "at the bazaar"),
    ("near the river", "by the stream"),
    ("after lunch", "following the midday meal"),
    ("during the storm", "while the storm raged"),
    ("in the city", "downtown"),
    ("last winter", "during the previous winter"),
    ("at the station", "at the depot"),
    ("before dinner", "prior to the evening meal"),
    ("on the hill", "up on the slope"),
]


def eval_pairs(n_pairs: int = 300, seed: int = 20240605) -> list[tuple[str, str]]:
    """Paraphrase pairs (query, partner); deterministic for a given seed."""
    rng = random.Random(seed)
    pairs: list[tuple[str, str]] = []
    seen: set[str] = set()
    while len(pairs) < n_pairs:
        who, act, what, where = (
            rng.choice(words) for words in (_PEOPLE, _ACTIONS, _THINGS, _PLACES)
        )
        a = f"{who[0].capitalize()} {act[0]} {what[0]} {where[0]}."
        if a in seen:
            continue
        seen.add(a)
        b = f"{where[1].capitalize()}, {who[1]} {act[1]} {what[1]}."
        pairs.append((a, b))
    return pairs


_VERBS = [
    "Check",
    "Measure",
    "Describe",
    "Compare",
    "Label",
    "Sort",
    "Store",
    "Inspect",
    "Record",
    "Move",
]
_OBJECTS = [
    "the sensor readings",
    "every joint angle",
    "the gripper force",
    "the camera image",
    "the arm trajectory",
    "the battery level",
    "each grasp attempt",
    "the conveyor speed",
    "the object pose",
    "the motor current",
]
_PURPOSES = [
    "before the next episode starts",
    "so the policy can learn from it",
    "and report any anomaly",
    "with a timestamp",
    "for the nightly evaluation",
    "unless the robot is idle",
    "once per second",
    "while the lights are off",
]


def calibration_sentences(n: int = 128, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    return [
        f"{rng.choice(_VERBS)} {rng.choice(_OBJECTS)} {rng.choice(_PURPOSES)}." for _ in range(n)
    ]


def generated_images(n: int, size: int, seed: int) -> np.ndarray:
    """`n` RGB images, uint8 (n, size, size, 3): a vertical two-colour gradient with a horizon,
    three to six filled ellipses and rectangles of random colours, a light vignette and Gaussian
    noise (σ 4 grey levels). Deterministic for a seed."""
    from PIL import Image, ImageDraw, ImageFilter

    rng = np.random.default_rng(seed)
    out = np.empty((n, size, size, 3), dtype=np.uint8)
    ys = np.linspace(0.0, 1.0, size)[:, None, None]
    yy, xx = np.mgrid[0:size, 0:size] / max(size - 1, 1)
    vignette = 1.0 - 0.35 * ((yy - 0.5) ** 2 + (xx - 0.5) ** 2)[..., None]
    for i in range(n):
        top, bottom = rng.uniform(40, 230, 3), rng.uniform(20, 200, 3)
        horizon = rng.uniform(0.3, 0.7)
        base = np.where(ys < horizon, top + (bottom - top) * ys, bottom * (1.1 - 0.4 * ys))
        image = Image.fromarray(np.clip(base * np.ones((1, size, 3)), 0, 255).astype(np.uint8))
        draw = ImageDraw.Draw(image)
        for _ in range(int(rng.integers(3, 7))):
            x0, y0 = rng.uniform(-0.1, 0.9, 2) * size
            w, h = rng.uniform(0.1, 0.5, 2) * size
            colour = tuple(int(c) for c in rng.integers(0, 256, 3))
            shape = draw.ellipse if rng.random() < 0.5 else draw.rectangle
            shape([x0, y0, x0 + w, y0 + h], fill=colour)
        image = image.filter(ImageFilter.GaussianBlur(radius=size / 96))
        pixels = np.asarray(image, dtype=np.float64) * vignette + rng.normal(0, 4, (size, size, 3))
        out[i] = np.clip(pixels, 0, 255).astype(np.uint8)
    return out
