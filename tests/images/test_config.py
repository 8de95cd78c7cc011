import pytest

from accelkit.errors import ConfigError
from accelkit.images.settings.config import PreprocessConfig, ServiceConfig

ORIGINAL = """
triton:
  url: "localhost:8001"
  model_name: "resnet50"
  model_version: "1"
  protocol: grpc
  timeout: 10
  max_retries: 2
  retry_delay: 0.5
  input_name: "input"
  output_name: "output"
preprocess:
  image_size: [224, 224]
  mean: [0.485, 0.456, 0.406]
  std: [0.229, 0.224, 0.225]
  batch_size: 16
  num_workers: 2
  data_format: NHWC
  use_gpu: true
  jax_platform: null
log_level: INFO
cache_compiled_functions: true
"""


@pytest.fixture
def original(tmp_path):
    path = tmp_path / "service.yaml"
    path.write_text(ORIGINAL)
    return path


def test_original_config_must_choose_its_backend(original):
    """EmbeddingTrident always ran Triton: its config must now say which backend it means."""
    with pytest.raises(
        ConfigError, match=r"triton: section but no model\.backend; set model\.backend: triton"
    ):
        ServiceConfig.from_yaml(original, env={})
    chosen = ServiceConfig.from_yaml(original, env={"ACCELKIT_MODEL_BACKEND": "onnxruntime"})
    assert chosen.model.backend == "onnxruntime"


def test_original_preprocess_section_loads_unchanged(original):
    config = ServiceConfig.from_yaml(original, env={}, model={"backend": "triton"})
    p = config.preprocess
    assert (
        p.image_size,
        p.batch_size,
        p.num_workers,
        p.data_format,
        p.platform,
    ) == ((224, 224), 16, 2, "NHWC", "gpu")  # EmbeddingTrident's use_gpu: true
    assert p.mean == (0.485, 0.456, 0.406) and p.std == (0.229, 0.224, 0.225)
    m = config.model
    assert (m.triton_url, m.triton_model_name, m.triton_protocol, m.input_name, m.output_name) == (
        "localhost:8001",
        "resnet50",
        "grpc",
        "input",
        "output",
    )
    assert config.log_level == "INFO"
    from accelkit.images.embedding.preprocess import make_preprocessor

    with make_preprocessor("host", p) as pre:  # built from the config: one name per setting
        assert (pre.batch_size, pre.data_format, pre.batch_sizes[-1]) == (16, "NHWC", 16)


def test_unknown_keys_are_named(original, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(ORIGINAL.replace("num_workers", "num_wrkers"))
    with pytest.raises(ConfigError, match="unknown key 'num_wrkers'"):
        ServiceConfig.from_yaml(bad, env={})
    bad.write_text(ORIGINAL + "milvus_typo: 1\n")
    with pytest.raises(ConfigError, match="unknown key 'milvus_typo'"):
        ServiceConfig.from_yaml(bad, env={})
    bad.write_text(ORIGINAL.replace("retry_delay", "retry_dealy"))
    with pytest.raises(ConfigError, match="unknown key 'retry_dealy'"):
        ServiceConfig.from_yaml(bad, env={})
    with pytest.raises(ConfigError, match="unknown key 'colour'"):
        ServiceConfig.from_env(env={}, preprocess={"colour": 1})


def test_precedence_keywords_yaml_env_defaults(original):
    env = {
        "ACCELKIT_PREPROCESS_BATCH_SIZE": "64",
        "ACCELKIT_PREPROCESS_FIT": "letterbox",
        "ACCELKIT_PREPROCESS_PLATFORM": "cpu",
        "ACCELKIT_MODEL_BACKEND": "triton",
        "TRITON_URL": "envhost:1",
        "ACCELKIT_LOG_LEVEL": "DEBUG",
    }
    config = ServiceConfig.from_yaml(original, env=env, preprocess={"num_workers": 8})
    p = config.preprocess
    assert p.batch_size == 16  # YAML beats environment
    assert p.fit == "letterbox"  # environment beats defaults
    assert p.platform == "gpu"  # the file's legacy use_gpu: true beats the environment too
    assert p.num_workers == 8  # keywords beat YAML
    assert config.model.backend == "triton" and config.model.triton_url == "localhost:8001"
    assert config.log_level == "INFO"
    env_only = ServiceConfig.from_env(env=env)
    assert (
        env_only.preprocess.batch_size == 64
        and env_only.model.triton_url == "envhost:1"
        and env_only.log_level == "DEBUG"
    )


def test_every_field_has_an_env_variable():
    for name, field in PreprocessConfig.model_fields.items():
        value = {
            "image_size": "128",
            "mean": "0.5,0.5,0.5",
            "std": "0.5,0.5,0.5",
            "batch_size": "3",
            "num_workers": "2",
            "data_format": "NHWC",
            "platform": "gpu",
            "fit": "center-crop",
            "resample": "bicubic",
            "dtype": "bfloat16",
            "cache_compiled": "false",
            "max_pixels": "1000",
            "fast_jpeg_downscale": "false",
            "reducing_gap": "2.5",
            "engine": "jax",
        }[name]
        config = ServiceConfig.from_env(env={f"ACCELKIT_PREPROCESS_{name.upper()}": value})
        assert getattr(config.preprocess, name) != field.default, name


def test_one_platform_setting(tmp_path):
    """EmbeddingTrident's use_gpu / jax_platform keys map onto the one `platform`; the platform
    variables are read once, by runtime/devices, not by the images config."""

    def loaded(text, env=None):
        path = tmp_path / "p.yaml"
        path.write_text(text)
        return ServiceConfig.from_yaml(path, env=env or {}).preprocess.platform

    assert loaded("preprocess:\n  use_gpu: true\n") == "gpu"
    assert loaded("preprocess:\n  use_gpu: false\n") is None  # asks for nothing: env/auto decide
    assert loaded("preprocess:\n  use_gpu: true\n  jax_platform: cpu\n") == "cpu"
    assert loaded("preprocess:\n  jax_platform: cuda\n") == "gpu"
    assert loaded("preprocess:\n  use_gpu: true\n  platform: cpu\n") == "cpu"  # ours beats legacy
    assert ServiceConfig.from_env(env={"JAX_USE_GPU": "1"}).preprocess.platform is None
    with pytest.raises(ConfigError, match=r"p.yaml \[preprocess\]: platform 'quantum'"):
        loaded("preprocess:\n  platform: quantum\n")
    with pytest.raises(ConfigError, match="use_gpu 'maybe' must be true or false"):
        loaded("preprocess:\n  use_gpu: maybe\n")
    with pytest.raises(ConfigError, match="ACCELKIT_PREPROCESS_BATCH_SIZE '0'"):
        ServiceConfig.from_env(env={"ACCELKIT_PREPROCESS_BATCH_SIZE": "0"})
    with pytest.raises(ConfigError, match="--batch-size 0"):
        ServiceConfig.from_env(env={}, preprocess={"batch_size": 0})


def test_precedence_defaults_env_file_arguments_for_every_section(tmp_path):
    """defaults < environment (other tools' names below ours) < file (other tools' sections below
    ours) < arguments, section by section."""
    path = tmp_path / "c.yaml"
    path.write_text(
        "milvus:\n  host: legacy-file\n  collection_name: legacy\n  embedding_dim: 64\n"
        "store:\n  collection_name: ours\nserver:\n  port: 9001\nlog_level: INFO\n"
        "model:\n  backend: onnxruntime\n"
    )
    env = {
        "MILVUS_HOST": "legacy-env",
        "MILVUS_EMBEDDING_DIM": "32",
        "ACCELKIT_STORE_TIMEOUT": "5",
        "ACCELKIT_STORE_NLIST": "7",
        "ACCELKIT_SERVER_PORT": "9000",
        "ACCELKIT_SERVER_MAX_TOPK": "10",
        "ACCELKIT_LOG_LEVEL": "DEBUG",
    }
    config = ServiceConfig.from_yaml(path, env=env, store={"nlist": 9}, server={"max_topk": 11})
    assert config.store.uri == "http://legacy-file:19530"  # file's milvus: beats MILVUS_HOST
    assert config.store.collection_name == "ours"  # our section beats the legacy one
    assert config.store.timeout == 5.0 and config.store.nlist == 9  # env > default; args > env
    assert config.model.embedding_dim == 64  # milvus.embedding_dim is the model's dimension
    assert (config.server.port, config.server.max_topk) == (9001, 11)
    assert config.log_level == "INFO"
    env_only = ServiceConfig.from_env(env=env)
    assert env_only.store.uri == "http://legacy-env:19530"
    assert env_only.model.embedding_dim == 32 and env_only.log_level == "DEBUG"
    assert ServiceConfig.from_env(env={**env, "ACCELKIT_STORE_URI": "./x.db"}).store.uri == "./x.db"


def test_shipped_configs_load():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "configs"
    files = sorted(root.glob("images*.yaml"))
    assert files
    for file in files:
        ServiceConfig.from_yaml(file, env={})


def test_url_allow_and_request_caps_from_the_environment():
    config = ServiceConfig.from_env(
        env={
            "ACCELKIT_SERVER_URL_ALLOW": "Images.Internal., [::1],10.0.0.7",
            "ACCELKIT_SERVER_MAX_IDS_PER_REQUEST": "500",
            "ACCELKIT_SERVER_MAX_FILTER_VALUES": "9",
        }
    )
    assert config.server.url_allow == ["images.internal", "::1", "10.0.0.7"]
    limits = config.server.request_limits()
    assert (limits.ids, limits.filter_values, limits.items) == (500, 9, 256)
    with pytest.raises(ConfigError, match="MAX_METADATA_KEYS '0': must be at least 1"):
        ServiceConfig.from_env(env={"ACCELKIT_SERVER_MAX_METADATA_KEYS": "0"})


def test_thumbnails_setting(tmp_path):
    assert ServiceConfig.from_env(env={}).store.thumbnails == "auto"
    env = {"ACCELKIT_STORE_THUMBNAILS": " OFF "}
    assert ServiceConfig.from_env(env=env).store.thumbnails == "off"
    path = str(tmp_path / "t.sqlite")
    assert ServiceConfig.from_env(env={}, store={"thumbnails": path}).store.thumbnails == path
    for bad in ("", str(tmp_path), "somewhere/"):
        with pytest.raises(ConfigError, match="SQLite file"):
            ServiceConfig.from_env(env={}, store={"thumbnails": bad})


def test_resample_and_reducing_gap_settings(tmp_path):
    """`resample` (bilinear by default, bicubic as CLIP's and SigLIP's processors) reaches both
    engines; `reducing_gap: 0` in a file turns the reduction off (null there reads as not set);
    the model record holds `resample` only where it is not bilinear, so records made before it
    existed still compare equal."""
    from accelkit.images.embedding.models import image_tower_record
    from accelkit.images.embedding.preprocess import make_preprocessor

    path = tmp_path / "c.yaml"
    path.write_text(
        "preprocess:\n  resample: bicubic\n  reducing_gap: 0\n  fit: shortest-edge-crop\n"
    )
    loaded = ServiceConfig.from_yaml(path, env={}).preprocess
    assert (loaded.resample, loaded.reducing_gap, loaded.fit) == (
        "bicubic",
        None,
        "shortest-edge-crop",
    )
    with make_preprocessor("host", loaded) as pre:
        assert (pre.resample, pre.reducing_gap, pre.fit) == ("bicubic", None, "shortest-edge-crop")
    default = ServiceConfig.from_env(env={}).preprocess
    assert (default.resample, default.reducing_gap) == ("bilinear", 3.0)
    with pytest.raises(ConfigError, match=r"RESAMPLE 'lanczos'.*'bilinear' or 'bicubic'"):
        ServiceConfig.from_env(env={"ACCELKIT_PREPROCESS_RESAMPLE": "lanczos"})
    with pytest.raises(ConfigError, match=r"reducing-gap 0\.5: must be at least 1, or 0"):
        ServiceConfig.from_env(env={}, preprocess={"reducing_gap": 0.5})
    model = ServiceConfig.from_env(env={}).model.model_copy(update={"onnx_path": __file__})
    record = image_tower_record(model, default)
    assert list(record) == ["weights", "output_name", "image_size", "mean", "std", "fit",
                            "data_format", "normalize"]  # fmt: skip
    bicubic = image_tower_record(model, default.model_copy(update={"resample": "bicubic"}))
    assert {k: v for k, v in bicubic.items() if k != "resample"} == record
    assert bicubic["resample"] == "bicubic"


def test_a_port_out_of_range_is_named(tmp_path, capsys):
    """Seen: `serve --port -1` (or 70000, or server.port in a file) was `internal error:
    OverflowError` (exit 1) from bind(). The port is checked as the config's own setting, one
    line that names where it came from (exit 2); 0 (any free port) stays allowed."""
    from accelkit.cli import main

    assert ServiceConfig.from_env(env={}, server={"port": 0}).server.port == 0
    for bad in (-1, 65536):
        with pytest.raises(
            ConfigError, match=f"--port {bad}: must be a port number from 0 to 65535"
        ):
            ServiceConfig.from_env(env={}, server={"port": bad})
    with pytest.raises(ConfigError, match="SERVER_PORT '70000': must be a port number"):
        ServiceConfig.from_env(env={"ACCELKIT_SERVER_PORT": "70000"})
    path = tmp_path / "c.yaml"
    path.write_text("server:\n  port: 8080\n")
    with pytest.raises(SystemExit) as done:
        main(["images", "serve", "--config", str(path), "--port", "-1"])
    err = capsys.readouterr().err
    assert done.value.code == 2 and err.count("\n") == 1 and "--port -1" in err, err


def test_preprocessing_options_are_declared_once():
    """`PreprocessConfig` is the one list: the preprocessors take its fields by name (and no
    other), `images embed`'s preprocessing options are its flagged fields with their help, and
    the library's `embed` takes each of them as an override (None: the config's)."""
    import inspect

    import typer

    from accelkit.images import api
    from accelkit.images.cli import embed_command
    from accelkit.images.embedding.preprocess import JAXImagePreprocessor, make_preprocessor
    from accelkit.runtime.options import flags

    fields = PreprocessConfig.model_fields
    for function in (JAXImagePreprocessor, make_preprocessor):
        keywords = {
            name: p
            for name, p in inspect.signature(function).parameters.items()
            if p.kind is p.KEYWORD_ONLY and name != "cache_dir"
        }
        assert set(keywords) == set(fields) - (
            {"engine"} if function is make_preprocessor else set()
        )
        assert all(keywords[name].default == fields[name].default for name in keywords)
    with pytest.raises(ConfigError, match="unknown field 'max_batch'"):
        make_preprocessor("host", max_batch=4)

    app = typer.Typer(add_completion=False)
    app.command()(embed_command)
    options = {p.name: p for p in typer.main.get_command(app).params}
    flagged = {name: field for name, field, _ in flags(PreprocessConfig)}
    assert flagged and set(flagged) <= set(options)
    for name, field in flagged.items():
        assert options[name].help == field.description
        assert options[name].default is None  # not given: the config file's value
    embed = inspect.signature(api.embed).parameters
    assert all(embed[name].default is None for name in flagged)
    own = set(options) - set(flagged)
    assert not own & set(fields), own & set(fields)  # no preprocessing option declared by the face
