"""The demo's header names the CPU model (issue 42 item 5): the recorded tables differ by CPU model, not only by the
kernel capability (two AVX-512 machines printed different tables), so a user needs it to pick the table to compare
with. ``/proc/cpuinfo``'s ``model name``, else ``platform.processor()``."""
import torch

import mmrl.demo as demo
import mmrl.environment as environment


def test_the_header_prints_the_cpu_model(monkeypatch):
    monkeypatch.setattr(environment, "cpu_model", lambda: "Intel(R) Xeon(R) Platinum 8480+")
    for key, value in demo.PINNED_ENV.items():  # pin_threads sets them in os.environ: restored after the test
        monkeypatch.setenv(key, value)
    old = torch.get_num_threads(), torch.get_num_interop_threads()
    try:
        line = demo.header(0, demo.pin_threads())
    finally:
        torch.set_num_threads(old[0])
    assert line.startswith("[demo] seed 0; python ")
    assert ", cpu model Intel(R) Xeon(R) Platinum 8480+, " in line, line
    assert f", cpu {torch.backends.cpu.get_cpu_capability()}, " in line, line


def test_the_cpu_model_falls_back_to_platform_processor(monkeypatch, tmp_path):
    monkeypatch.setattr(environment, "Path", lambda p: tmp_path / "no-cpuinfo")
    monkeypatch.setattr(environment.platform, "processor", lambda: "arm")
    assert environment.cpu_model() == "arm"
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 9654 96-Core Processor\n")
    monkeypatch.setattr(environment, "Path", lambda p: cpuinfo)
    assert environment.cpu_model() == "AMD EPYC 9654 96-Core Processor"
