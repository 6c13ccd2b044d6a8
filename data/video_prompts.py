"""Text prompts for a real text-to-video model: a prompt set by hub id through
``datasets.load_dataset`` (VideoPhy-2's test prompts by default) or a local text file with
one prompt per line."""

from __future__ import annotations

from pathlib import Path

from common.errors import UserError


def video_prompts(dataset_cfg) -> list[str]:
    if dataset_cfg.prompts_file:
        path = Path(dataset_cfg.prompts_file)
        if not path.is_file():
            raise UserError(f"dataset.prompts_file: no such file {path}")
        prompts = [line.strip() for line in path.read_text().splitlines() if line.strip()]
    else:
        from data.hub import load_hub_dataset

        rows = load_hub_dataset(dataset_cfg.hub_id, split=dataset_cfg.split,
                                instead="set dataset.prompts_file to a file of prompts")
        if dataset_cfg.prompt_column not in rows.column_names:
            raise UserError(f"dataset {dataset_cfg.hub_id} has no column "
                            f"'{dataset_cfg.prompt_column}' (dataset.prompt_column); it has "
                            f"{', '.join(rows.column_names)}")
        prompts = [str(p) for p in rows[dataset_cfg.prompt_column]]
    if not prompts:
        raise UserError(f"dataset={dataset_cfg.name} has no prompts")
    return prompts[:int(dataset_cfg.limit)]
