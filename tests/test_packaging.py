"""A plain (non-editable) install must carry every package and the presets."""

from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent


def test_every_source_folder_is_a_package():
    for folder in (ROOT / "simulator").rglob("*"):
        if folder.is_dir() and any(folder.glob("*.py")) and folder.name != "__pycache__":
            assert (folder / "__init__.py").exists(), f"{folder} is not a package"


def test_setuptools_finds_every_module():
    setuptools = pytest.importorskip("setuptools")
    found = set(setuptools.find_packages(str(ROOT), include=["simulator", "simulator.*",
                                                            "topologies", "scenarios"]))
    for path in (ROOT / "simulator").rglob("*.py"):
        package = ".".join(path.relative_to(ROOT).parent.parts)
        assert package in found, f"{path} would be left out of a wheel"
