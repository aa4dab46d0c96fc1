import pytest

from views_testdata import make_clip, make_sample


@pytest.fixture
def clip():
    return make_clip()


@pytest.fixture
def sample():
    return make_sample()
