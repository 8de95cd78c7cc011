"""One config loader: precedence defaults < environment < file < flags, the same for every
capability that has settings (stats, images, quant; bench takes flags only), and errors that name
the input the user gave."""

import pytest

from accelkit.errors import ConfigError
from accelkit.images.settings.config import ServiceConfig
from accelkit.quant.config import load_config
from accelkit.runtime.config import Section, Settings, load, load_settings
from accelkit.stats.cli import ENV_PREFIX, StatsSettings


class Job(Settings):
    a: int = 0
    b: int = 0
    c: int = 0
    d: int = 0


def layered(tmp_path, text):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return path


def test_generic_section_layers(tmp_path):
    """d from the default, c from the environment, b from the file, a from the arguments; each
    source also sets everything below it, so a wrong order shows."""
    path = layered(tmp_path, "job:\n  a: 3\n  b: 3\n")
    env = {"ACCELKIT_JOB_A": "2", "ACCELKIT_JOB_B": "2", "ACCELKIT_JOB_C": "2"}
    section = Section(Job, key="job", env_prefix="ACCELKIT_JOB_")
    job = load([section], path=path, env=env, arguments={"job": {"a": 4}})["job"]
    assert (job.a, job.b, job.c, job.d) == (4, 3, 2, 0)


def test_aliases_sit_below_our_own_names(tmp_path):
    section = Section(
        Job,
        key="job",
        env_prefix="ACCELKIT_JOB_",
        env_aliases={"OLD_A": "a", "OLD_B": "b"},
        file_aliases={"old": {"x": "a", "y": "c"}},
    )
    path = layered(tmp_path, "old:\n  x: 7\n  y: 7\njob:\n  a: 8\n")
    env = {"OLD_A": "5", "OLD_B": "5", "ACCELKIT_JOB_B": "6"}
    job = load([section], path=path, env=env)["job"]
    assert (job.a, job.b, job.c) == (8, 6, 7)
    with pytest.raises(ConfigError, match=r"\[old\]: unknown key 'z'; allowed keys: x, y"):
        load([section], path=layered(tmp_path, "old:\n  z: 1\n"), env={})
    with pytest.raises(ConfigError, match="unknown key 'jobs'"):
        load([section], path=layered(tmp_path, "jobs:\n  a: 1\n"), env={})
    with pytest.raises(ConfigError, match=r"^OLD_A 'x': Input should be a valid integer"):
        load([section], env={"OLD_A": "x"})
    with pytest.raises(ConfigError, match=r"c.yaml \[old\]: x 'x': Input should be"):
        load([section], path=layered(tmp_path, "old:\n  x: x\n"), env={})


def test_stats_precedence(tmp_path):
    path = layered(tmp_path, "job:\n  seed: 3\n  batch_size: 3\n")
    env = {f"{ENV_PREFIX}SEED": "2", f"{ENV_PREFIX}BATCH_SIZE": "2", f"{ENV_PREFIX}CACHE_MB": "2"}
    s = load_settings(
        StatsSettings, yaml_path=path, section="job", env_prefix=ENV_PREFIX, env=env, seed=4
    )
    assert (s.seed, s.batch_size, s.cache_mb, s.max_frames) == (4, 3, 2.0, None)
    with pytest.raises(ConfigError, match=r"^ACCELKIT_STATS_SEED 'abc': "):
        load_settings(StatsSettings, env_prefix=ENV_PREFIX, env={f"{ENV_PREFIX}SEED": "abc"})
    with pytest.raises(ConfigError, match=r"^--format 'bogus': "):
        load_settings(StatsSettings, env={}, format="bogus")


def test_images_precedence(tmp_path):
    path = layered(tmp_path, "preprocess:\n  batch_size: 3\n  num_workers: 3\n")
    env = {
        "ACCELKIT_PREPROCESS_BATCH_SIZE": "2",
        "ACCELKIT_PREPROCESS_NUM_WORKERS": "2",
        "ACCELKIT_PREPROCESS_MAX_PIXELS": "2",
    }
    p = ServiceConfig.from_yaml(path, env=env, preprocess={"batch_size": 4}).preprocess
    assert (p.batch_size, p.num_workers, p.max_pixels, p.dtype) == (4, 3, 2, "float32")


def test_quant_precedence(tmp_path):
    path = layered(tmp_path, "wbits: 3\nabits: 3\n")
    env = {
        "OPENPI_DUQUANT_WBITS_DEFAULT": "5",
        "OPENPI_DUQUANT_BLOCK": "32",
        "ACCELKIT_QUANT_WBITS": "2",
        "ACCELKIT_QUANT_ABITS": "2",
        "ACCELKIT_QUANT_SEED": "2",
    }
    cfg = load_config(path, env=env, wbits=4)
    assert (cfg.wbits, cfg.abits, cfg.seed, cfg.block_size, cfg.rotation_steps) == (
        4,
        3,
        2,
        32,
        256,
    )
    with pytest.raises(ConfigError, match=r"c.yaml: smooth_alpha 2: smooth_alpha must lie"):
        load_config(layered(tmp_path, "smooth_alpha: 2\n"), env={})
    with pytest.raises(ConfigError, match=r"^OPENPI_DUQUANT_WBITS_DEFAULT 'five': "):
        load_config(env={"OPENPI_DUQUANT_WBITS_DEFAULT": "five"})


def test_relative_paths_in_a_file_resolve_beside_it(tmp_path, monkeypatch):
    """A path a config file gives relative means one beside that file, whatever the working
    folder (a service manager starts `images serve` in `/`); from the environment or a flag it
    keeps meaning one below the working folder. Stats jobs alike: `output`/`plot` beside the
    file, `dataset` too when it is there (else as written: a repo id such as lerobot/pusht)."""
    folder, elsewhere = tmp_path / "etc", tmp_path / "run"
    (folder / "episodes").mkdir(parents=True)
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    images = folder / "images.yaml"
    images.write_text(
        "model:\n  onnx_path: model/image.onnx\n  tokenizer_path: model\n  cache_dir: cache\n"
        "store:\n  uri: data/images.db\n  thumbnails: auto\n"
        "server:\n  allowed_roots: [photos, /srv/photos]\n"
    )
    config = ServiceConfig.from_yaml("../etc/images.yaml", env={})
    assert config.model.onnx_path == str(folder / "model" / "image.onnx")
    assert config.model.tokenizer_path == str(folder / "model")
    assert config.model.cache_dir == str(folder / "cache")
    assert config.store.uri == str(folder / "data" / "images.db")
    assert config.store.thumbnails == "auto"
    assert config.server.allowed_roots == [str(folder / "photos"), "/srv/photos"]
    config = ServiceConfig.from_yaml(
        images,
        env={"ACCELKIT_STORE_URI": "env.db", "ACCELKIT_MODEL_TEXT_ONNX_PATH": "t.onnx"},
        model={"onnx_path": "flag.onnx"},
    )
    assert config.model.onnx_path == "flag.onnx" and config.model.text_onnx_path == "t.onnx"
    assert config.store.uri == str(folder / "data" / "images.db")  # the file beats the variable
    assert ServiceConfig.from_env(env={"ACCELKIT_STORE_URI": "env.db"}).store.uri == "env.db"
    server = layered(folder, "store:\n  uri: http://milvus:19530\n  thumbnails: thumbs.sqlite\n")
    config = ServiceConfig.from_yaml(server, env={})
    assert config.store.uri == "http://milvus:19530"
    assert config.store.thumbnails == str(folder / "thumbs.sqlite")
    jobs = folder / "jobs.yaml"
    jobs.write_text(
        "here:\n  dataset: episodes\n  output: out/norm_stats.json\n  plot: out/stats.png\n"
        "hub:\n  dataset: lerobot/pusht\n"
    )
    here = load_settings(StatsSettings, yaml_path=jobs, section="here", env={})
    assert here.dataset == str(folder / "episodes")
    assert (here.output, here.plot) == (str(folder / "out/norm_stats.json"), str(folder / "out/stats.png"))  # fmt: skip
    hub = load_settings(StatsSettings, yaml_path=jobs, section="hub", env={}, output="o.json")
    assert hub.dataset == "lerobot/pusht" and hub.output == "o.json"


@pytest.mark.parametrize("given", ["/dev/null", "folder"])
def test_a_config_that_is_not_a_regular_file_is_named_as_such(tmp_path, capsys, given):
    """`--config /dev/null` (or a folder) exists, so it is not said not to;
    the one line says what it is and what --config takes, exit 2."""
    from accelkit.runtime.config import read_yaml
    from tests.support.cli import run_cli

    path = tmp_path / given if given == "folder" else given
    if given == "folder":
        path.mkdir()
    with pytest.raises(ConfigError, match=r"is (not a regular file|a folder)") as caught:
        read_yaml(path)
    assert "does not exist" not in str(caught.value)
    code, _, err = run_cli(["stats", str(tmp_path), "--config", str(path)], capsys)
    assert code == 2 and "does not exist" not in err and "give --config the path of a YAML" in err
