"""``onnxsight verify-generation``: the step programs exported and saved, a generation verified step by step,
and the exit codes: 0 every step agrees, 1 it diverged (with the step and the rule), 2 it could not run,
3 a usage error."""

from __future__ import annotations

import contextlib
import io
import json
import textwrap
from pathlib import Path

import onnx
import pytest

from onnxsight import cli
from tests.verification import generation_faults as faults

pytest.importorskip("transformers")

MODEL_FILE = textwrap.dedent('''
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    def build():
        torch.manual_seed(0)
        config = LlamaConfig(vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                             num_key_value_heads=2, intermediate_size=64, max_position_embeddings=64, pad_token_id=0)
        ids = torch.randint(1, 128, (2, 6), generator=torch.Generator().manual_seed(1))
        mask = torch.ones(2, 6, dtype=torch.long)
        mask[0, :2] = 0
        return LlamaForCausalLM(config).eval(), {"input_ids": ids, "attention_mask": mask}

    def three_inputs():
        model, prompt = build()
        return model, (prompt["input_ids"], prompt["attention_mask"], prompt["input_ids"])
''')


def _main(*argv: object) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, tuple[int, str, str]]:
    """The command run once as a user first runs it: export, save, verify 4 steps, every report."""
    folder = tmp_path_factory.mktemp("generation")
    model = folder / "lm.py"
    model.write_text(MODEL_FILE)
    outcome = _main("verify-generation", model, "--steps", 4, "--save", folder / "onnx", "--report", folder / "r",
                    "--sarif", folder / "g.sarif", "--summary", folder / "summary.md")
    return model, folder, outcome


def test_exports_saves_and_verifies_every_step(exported: tuple[Path, Path, tuple[int, str, str]]) -> None:
    _, folder, (code, out, err) = exported
    assert code == cli.EXIT_OK, err
    lines = out.splitlines()
    assert lines[0] == str(folder / "onnx" / "decoder.onnx") and (folder / "onnx" / "decoder.onnx").is_file()
    table = lines[1:6]
    assert table[0].split()[:3] == ["step", "phase", "past"]
    assert [line.split()[0] for line in table[1:]] == ["0", "1", "2", "3"]
    assert all(line.split()[-1] == "ok" and "agree" in line for line in table[1:])
    assert [Path(p).suffix for p in lines[6:9]] == [".md", ".html", ".sarif"]
    assert lines[9] == str(folder / "g.sarif")
    assert "generation verified: all 4 steps agree" in err
    assert "Generation: **generation verified: all 4 steps agree" in (folder / "summary.md").read_text()


def test_a_faulty_decoder_file_diverges_with_exit_1(exported: tuple[Path, Path, tuple[int, str, str]]) -> None:
    model, folder, _ = exported
    faulty = folder / "faulty.onnx"
    onnx.save(faults.new_keys_first(onnx.load(folder / "onnx" / "decoder.onnx"), "present.0.key"), faulty)
    code, out, err = _main("verify-generation", model, "--steps", 3, "--decoder", faulty, "--sarif",
                           folder / "faulty.sarif")
    assert code == cli.EXIT_VERIFY, err
    steps = [line.split() for line in out.splitlines()[1:4]]
    assert steps[0][-1] == "ok" and steps[1][-1] in ("logits", "cache")
    assert "GEN001" in err and "GEN009" in err and "generation diverged at step 1: 1 of 3 steps agree" in err
    results = json.loads((folder / "faulty.sarif").read_text())["runs"][0]["results"]
    assert {r["ruleId"] for r in results} == {"GEN001", "GEN009"}


@pytest.mark.parametrize("argv, message", [
    (["--decoder", "missing.onnx"], "--decoder missing.onnx: no such file"),
    (["--encoder", "e.onnx"], "--encoder and --first-step go with --decoder"),
    (["--steps", "x"], "invalid int value"),
])
def test_usage_errors_exit_3(exported: tuple[Path, Path, tuple[int, str, str]], argv: list[str], message: str) -> None:
    model, _, _ = exported
    code, _, err = _main("verify-generation", model, *argv)
    assert code == cli.EXIT_USAGE and message in err


def test_a_prompt_that_is_not_a_dict_is_a_usage_error(exported: tuple[Path, Path, tuple[int, str, str]]) -> None:
    model, _, _ = exported
    code, _, err = _main("verify-generation", f"{model}:three_inputs", "--decoder", model)
    assert code == cli.EXIT_USAGE and "must return (model, prompt)" in err


def test_a_decoder_that_cannot_be_run_exits_2(exported: tuple[Path, Path, tuple[int, str, str]]) -> None:
    model, folder, _ = exported
    code, _, err = _main("verify-generation", model, "--steps", 0, "--decoder", folder / "onnx" / "decoder.onnx")
    assert code == cli.EXIT_EXPORT and "VER014" in err


@pytest.mark.slow
def test_an_export_that_fails_writes_the_reports_and_the_sarif_and_exits_2(tmp_path: Path) -> None:
    model = tmp_path / "failing.py"
    model.write_text("from tests.verification import user_decoder\n\n"
                     "def build():\n    return user_decoder.build(user_decoder.DataBranchDecoder)\n")
    code, out, err = _main("verify-generation", model, "--steps", 2, "--report", tmp_path / "r",
                           "--sarif", tmp_path / "g.sarif")
    assert code == cli.EXIT_EXPORT and "CAP002" in err, err
    written = [Path(line) for line in out.splitlines()]
    assert [p.suffix for p in written] == [".md", ".html", ".sarif", ".sarif"] and all(p.is_file() for p in written)
    results = json.loads((tmp_path / "g.sarif").read_text())["runs"][0]["results"]
    found = next(r for r in results if r["ruleId"] == "CAP002")
    assert found["locations"][0]["physicalLocation"]["artifactLocation"]["uri"].endswith("user_decoder.py")


@pytest.mark.slow
def test_a_step_onnx_runtime_cannot_load_exits_2_naming_the_op(tmp_path: Path) -> None:
    model = tmp_path / "bf16.py"
    model.write_text("import torch\nfrom tests.verification import user_decoder\n\ndef build():\n"
                     "    model, prompt = user_decoder.build()\n    return model.to(torch.bfloat16), prompt\n")
    code, _, err = _main("verify-generation", model, "--steps", 2)
    assert code == cli.EXIT_EXPORT, err
    assert "ORT001" in err and "DTY002" in err and "generation could not run: ONNX Runtime could not load" in err
    assert "0 of 2 steps ran" in err
