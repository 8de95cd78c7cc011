"""What the tests of `quant eval` share: its texts, a model folder with the MiniLM tokenizer, and
the command run for its JSON."""

from __future__ import annotations

import shutil

from tests.support.cli import result_of, run_cli

TEXTS = [
    "the robot picks up the red block",
    "a gripper closes around the handle of the mug",
    "move the arm slowly to the left side of the table",
    "open the drawer and put the spoon inside",
    "the camera sees two bowls and a plate",
    "push the button on the microwave",
    "stack the green cube on the blue one",
    "wipe the table with the sponge",
]


def with_tokenizer(folder):
    from accelkit.quant.models import minilm_path

    for name in TOKENIZER_FILES:
        shutil.copy(minilm_path() / name, folder / name)
    return folder


def run_json(args, capsys):
    code, out, err = run_cli(args, capsys)
    assert code == 0, err
    return result_of(out)


TOKENIZER_FILES = (
    "vocab.txt",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
)
