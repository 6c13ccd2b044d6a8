"""What ``run.py`` checks and adds on the command line before Hydra composes anything.

Hydra creates the run folder before any of our code runs, so every mistake we can see in
the arguments alone is reported here: one ``error:`` line, exit code 1, nothing written.
It also makes the selected paper's own config folder (``conf/paper/<key>/``: its method,
dataset, model and sweep options) searchable, turns ``scale=<name>`` into that paper's
preset (``conf/paper/<key>/scale/<name>.yaml``), and names sweep job folders by the
settings that actually vary.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import yaml
from omegaconf import OmegaConf

from common.errors import UserError, did_you_mean, ensure_writable
from experiments.claims.papers import find_paper, papers

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
GROUPS = ("model", "dataset", "method", "trainer", "logger", "paths", "sweep")
_SWEEP_FUNCTIONS = re.compile(r"^(range|choice|interval|glob|tag|sort|shuffle)\(")
DEVICE = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")


def _split_values(value: str) -> list[str]:
    """Top-level comma-separated values of an override (commas inside brackets, braces or
    quotes do not split)."""
    values, depth, quote, current = [], 0, "", ""
    for char in value:
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char in "[{(":
            depth += 1
        elif char in "]})":
            depth -= 1
        elif char == "," and depth == 0:
            values.append(current)
            current = ""
            continue
        current += char
    return [*values, current]


def _overrides(argv: list[str]) -> list[tuple[str, str]]:
    """(key, value) of every ``key=value`` argument (``+``/``++``/``~`` prefixes kept)."""
    return [tuple(a.split("=", 1)) for a in argv if "=" in a and not a.startswith("-")]


def paper_keys(argv: list[str]) -> list[str]:
    """The papers selected by ``+paper=<key>[,<key>...]``."""
    keys = []
    for key, value in _overrides(argv):
        if key.lstrip("+") == "paper":
            keys += [v for v in _split_values(value) if v and not _SWEEP_FUNCTIONS.match(v)]
    return keys


def paper_dirs(keys: list[str]) -> list[Path]:
    return [CONF_DIR / "paper" / key for key in keys if (CONF_DIR / "paper" / key).is_dir()]


def search_path_override(keys: list[str], user_dirs: tuple[Path, ...] = ()) -> list[str]:
    """``hydra.searchpath=[...]`` making each selected paper's folder searchable, then the
    user's config folders (``--config-dir``)."""
    dirs = paper_dirs(keys) + list(user_dirs)
    return [f"hydra.searchpath=[{','.join(f'file://{d}' for d in dirs)}]"] if dirs else []


def group_options(group: str, keys: list[str], user_dirs: tuple[Path, ...] = ()) -> list[str]:
    folders = [CONF_DIR / group] + [d / group for d in paper_dirs(keys) + list(user_dirs)]
    return sorted({p.stem for folder in folders if folder.is_dir()
                   for p in folder.glob("*.yaml")})


def scale_options(key: str) -> list[str]:
    """The paper's scale presets: ``cpu`` (the default as it is) and ``paper``, the
    abstract's setting, where one exists."""
    return sorted(p.stem for p in (CONF_DIR / "paper" / key / "scale").glob("*.yaml"))


def scale_override(argv: list[str], keys: list[str]) -> list[str]:
    """``argv`` with ``scale=<name>`` replaced by the selected paper's preset, appended to
    the defaults as a global config (its own group overrides, e.g. the model, apply; the
    command line still wins). Presets are per paper, so one paper and one scale a run."""
    out = []
    for arg in argv:
        key, equals, value = arg.partition("=")
        if key.lstrip("+") != "scale" or not equals:
            out.append(arg)
            continue
        if _is_swept(value):
            raise UserError(f"scale={value}: one scale per command (the presets change "
                            "models and sizes; compare them with make reproduce SCALE=...)")
        if value != "cpu" and len(keys) != 1:
            raise UserError(f"scale={value} selects one paper's preset: give one paper "
                            "(make reproduce SCALE=paper runs them one by one)")
        for paper in keys:
            if value not in scale_options(paper):
                raise did_you_mean(f"{paper} scale", value, scale_options(paper))
        if len(keys) == 1:  # scale=cpu over several papers: each default as it is
            out.append(f"+paper/{keys[0]}/scale@_global_={value}")
    return out


def check_arguments(argv: list[str], user_dirs: tuple[Path, ...] = ()) -> list[str]:
    """Raise ``UserError`` on what is wrong in ``argv``; return the selected papers."""
    overrides = _overrides(argv)
    if not any(key.lstrip("+") == "paper" for key, _ in overrides):
        raise UserError("no paper selected: python run.py +paper=<key> [overrides]")
    keys = paper_keys(argv)
    for key in keys:
        find_paper(key)
    check_groups_used(overrides, keys)
    for key, value in overrides:
        name = key.lstrip("+~")
        if name in GROUPS:
            known = group_options(name, keys, user_dirs)
            for option in _split_values(value):
                if option and not _SWEEP_FUNCTIONS.match(option) and option not in known:
                    raise did_you_mean(f"{name} option", option, known)
        elif name == "device":
            for option in _split_values(value):
                if not DEVICE.match(option):
                    raise UserError(f"device must be auto, cpu, cuda or cuda:<index>, not "
                                    f"'{option}'")
        elif name in ("hydra.run.dir", "hydra.sweep.dir", "paths.output_dir") and value:
            ensure_writable(Path(value.strip("'\"")), f"{name}={value}")
        elif name == "hydra/launcher" and value == "submitit_slurm":
            from experiments.runner.slurm import check_cluster

            check_cluster()
    return keys


SHARED_GROUPS = {"trainer": "does not train through Lightning (device= picks where it runs)",
                 "model": "reads no model from the model group"}


def check_groups_used(overrides: list[tuple[str, str]], keys: list[str]) -> None:
    """An override of a shared group (``trainer``, ``model``) that the selected paper does
    not use (``paper.uses``) is refused: the run would silently ignore it. A multirun over
    several papers applies it to those that use it and says which ignore it."""

    for key, value in overrides:
        group = key.lstrip("+~").split(".", 1)[0]
        if group not in SHARED_GROUPS:
            continue
        ignoring = [k for k in keys if group not in (find_paper(k).info.get("uses") or [])]
        if not ignoring:
            continue
        if len(ignoring) == len(keys):
            raise UserError(f"{', '.join(ignoring)} {SHARED_GROUPS[group]}: {key}={value} "
                            f"would change nothing; drop it (papers that use {group}: "
                            f"{', '.join(papers_using(group)) or 'none'})")
        print(f"note: {key}={value} applies to {', '.join(k for k in keys if k not in ignoring)};"
              f" it changes nothing for {', '.join(ignoring)} (each "
              f"{SHARED_GROUPS[group].split(' (')[0]})", file=sys.stderr)


def papers_using(group: str) -> list[str]:

    return [k for k in list(papers()) if group in (find_paper(k).info.get("uses") or [])]


def check_composition(argv: list[str], keys: list[str], require_data: bool = True,
                      user_dirs: tuple[Path, ...] = ()):
    """Compose the config as Hydra will, so a key that does not exist, a value of the wrong
    type or out of its schema's range ends in one line naming it, with a close match, instead
    of Hydra's message block or a failed job; returns the config of the first job. Each value
    of a swept setting (``key=a,b,c``, here or in the named sweep) is composed too, so a bad
    one is refused before any job runs. ``require_data``: a data setting left ``???`` is one
    line too. Needs the schemas registered."""
    settings, swept = [], {}
    for key, value in _overrides(argv):
        if key.lstrip("+~").startswith("hydra") or _SWEEP_FUNCTIONS.match(value):
            continue
        values = _split_values(value)
        settings.append((key, values[0]))
        if len(values) > 1:
            swept[key] = (value, values[1:])
    for key, value in _sweep_params(argv, keys).items():
        values = _split_values(value)
        if not _SWEEP_FUNCTIONS.match(value):
            swept.setdefault(key, (value, values))
    cfg = _compose_checked([f"{k}={v}" for k, v in settings], keys, require_data, user_dirs)
    for key, (given, values) in swept.items():
        for other in dict.fromkeys(values):
            changed = [f"{k}={other if k == key else v}" for k, v in settings]
            if key not in dict(settings):
                changed.append(f"{key}={other}")
            try:
                _compose_checked(changed, keys, require_data, user_dirs)
            except UserError as err:
                raise UserError(f"{key}={other} (of the sweep {key}={given}): {err}") from None
    return cfg


def _compose_checked(overrides: list[str], keys: list[str], require_data: bool,
                     user_dirs: tuple[Path, ...] = ()):
    """One composition, its keys and ranges checked; UserError with one line."""
    import dataclasses

    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError, ValidationError

    from experiments.schemas import check_ranges, reject_unknown_keys

    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = compose("config", overrides=overrides + search_path_override(keys, user_dirs))
    except HydraException as err:
        cause = err.__cause__
        full_key = getattr(cause, "full_key", None)
        if isinstance(cause, ConfigAttributeError | ConfigKeyError) and full_key:
            parent = full_key.rpartition(".")[0]
            schema = getattr(cause, "object_type", None)
            known = [f.name for f in dataclasses.fields(schema)] if dataclasses.is_dataclass(
                schema) else []
            raise did_you_mean("key", full_key, [f"{parent}.{k}" if parent else k
                                                 for k in known]) from None
        if isinstance(cause, ValidationError) and full_key:
            reason = str(cause).splitlines()[0]
            raise UserError(f"{full_key}: {reason}") from None
        lines = [line.strip() for line in str(err).splitlines() if line.strip()]
        message = lines[0]
        if message.endswith(":") and len(lines) > 1:  # "... while composing config:"
            message += " " + " ".join(lines[1:3])
        raise UserError(message) from None
    except yaml.YAMLError as err:  # a config file (a user's --config-dir one) is not YAML
        mark = getattr(err, "problem_mark", None)
        where = f"{mark.name}, line {mark.line + 1}" if mark else "a config file"
        raise UserError(f"{where} is not valid YAML: {getattr(err, 'problem', None) or err}"
                        ) from None
    missing = sorted(OmegaConf.missing_keys(cfg))
    if missing and require_data:  # a data folder or file nothing can fetch by name
        raise UserError(f"set {', '.join(f'{k}=<path>' for k in missing)}: this setting reads "
                        "data that cannot be fetched by name")
    reject_unknown_keys(cfg)
    check_ranges(cfg)
    return cfg


def _sweep_params(argv: list[str], keys: list[str]) -> dict[str, str]:
    """``hydra.sweeper.params`` of the named sweep (``+sweep=<name>``), if any."""
    params: dict[str, str] = {}
    for key, value in _overrides(argv):
        if key.lstrip("+") == "sweep":
            for paper_dir in paper_dirs(keys):
                path = paper_dir / "sweep" / f"{value}.yaml"
                if path.is_file():
                    found = OmegaConf.load(path).hydra.sweeper.get("params") or {}
                    params.update({k: str(v) for k, v in found.items()})
    return params


def _is_swept(value: str) -> bool:
    return len(_split_values(value)) > 1 or bool(_SWEEP_FUNCTIONS.match(value))


def job_name_override(argv: list[str], keys: list[str]) -> list[str]:
    """Name sweep job folders by the settings that vary (``<num>_<key=value>_...``): every
    setting given a single value, on the command line or in the named sweep, is left out."""
    settings = {key.lstrip("+~"): value for key, value in _overrides(argv)}
    settings.update(_sweep_params(argv, keys))
    fixed = {key for key, value in settings.items() if not _is_swept(value)}
    base = OmegaConf.load(CONF_DIR / "config.yaml").hydra.job.config.override_dirname
    exclude = sorted(set(base.exclude_keys) | fixed)
    return [f"hydra.job.config.override_dirname.exclude_keys=[{','.join(exclude)}]"]


# Hydra's flags that take a value (--info's is optional: one of these words)
VALUE_FLAGS = {"--cfg", "-c", "--package", "-p", "--config-path", "-cp", "--config-name",
               "-cn", "--config-dir", "-cd", "--experimental-rerun"}
INFO_VALUES = {"all", "config", "defaults", "defaults-tree", "plugins", "searchpath"}


def split_flags(argv: list[str]) -> tuple[list[str], list[str]]:
    """(Hydra's flags with their values, the overrides): Hydra's parser takes the overrides
    only as one run of positional arguments, so the overrides this module adds must not
    follow a flag (``--cfg job``)."""
    flags, overrides, argv = [], [], list(argv)
    while argv:
        arg = argv.pop(0)
        if not arg.startswith("-"):
            overrides.append(arg)
            continue
        flags.append(arg)
        takes = arg in VALUE_FLAGS or (arg in ("--info", "-i") and argv
                                       and argv[0] in INFO_VALUES)
        if takes and argv and "=" not in arg:
            flags.append(argv.pop(0))
    return flags, overrides


def check_folders(cfg) -> None:
    """``UserError`` for a run or cache folder that is empty or null (an empty
    ``paths.output_dir`` would put the cache at the file system's root), before Hydra
    creates anything."""
    for name in ("output_dir", "cache_dir"):
        value = OmegaConf.select(cfg, f"paths.{name}", default=None)
        if value is None or not str(value).strip():
            raise UserError(f"paths.{name} is empty: give a folder (default paths.output_dir="
                            "outputs, paths.cache_dir=${paths.output_dir}/cache)")


def user_config_dirs(flags: list[str]) -> tuple[list[str], tuple[Path, ...]]:
    """(the other flags, the folders of ``--config-dir D`` / ``-cd D``): a user's folder of
    config groups, searched after paperlab's (``D/method/mine.yaml`` is ``method=mine``).
    ``--config-name``/``--config-path`` would replace paperlab's root config: refused."""
    rest, dirs, flags = [], [], list(flags)
    while flags:
        flag = flags.pop(0)
        name, equals, value = flag.partition("=")
        if name in ("--config-dir", "-cd"):
            folder = Path(value if equals else (flags.pop(0) if flags else "")).expanduser()
            if not folder.is_dir():
                raise UserError(f"--config-dir {folder} is not a folder")
            dirs.append(folder.resolve())
        elif name in ("--config-name", "-cn", "--config-path", "-cp"):
            raise UserError(f"{name} replaces paperlab's root config (conf/config.yaml); put "
                            "your options in a folder of groups (D/method/mine.yaml) and "
                            "add --config-dir D method=mine")
        else:
            rest.append(flag)
    return rest, tuple(dirs)


def prepare(argv: list[str]) -> list[str]:
    """Check ``argv`` and return it with the paper search path and job naming added (once:
    the processes of a multi-process launch re-run the command with these already in it),
    every override first and Hydra's flags after them. A command that only prints
    (``--cfg``, ``--info``) may leave a data path unset."""
    flags, argv = split_flags(argv)
    flags, user_dirs = user_config_dirs(flags)
    printing = any(f in ("--cfg", "-c", "--info", "-i") for f in flags)
    keys = check_arguments(argv, user_dirs)
    argv = scale_override(argv, keys)
    cfg = check_composition(argv, keys, require_data=not printing, user_dirs=user_dirs)
    check_folders(cfg)
    if len(keys) == 1:  # a claim that names an undeclared metric: one line, before the run
        from experiments.claims.metrics import check_claim_metrics

        check_claim_metrics(keys[0], OmegaConf.to_container(cfg.paper, resolve=False))
    if "hydra/launcher=submitit_slurm" in argv and not printing:
        from experiments.runner.slurm import watch_jobs

        watch_jobs()
    given = {a.split("=", 1)[0] for a in argv}
    added = search_path_override(keys, user_dirs) + job_name_override(argv, keys)
    return argv + [a for a in added if a.split("=", 1)[0] not in given] + flags
