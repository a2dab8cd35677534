"""Configuring the Kubernetes client: every bad source is one ValueError naming it."""

import pytest

from gpufleet.kube.connect import api_client


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("clusters: [unclosed", id="not YAML"),
        pytest.param("just a string", id="a string"),
        pytest.param("clusters: 5", id="a list that is a number"),
        pytest.param("current-context: x\ncontexts: []\n", id="no such context"),
        pytest.param(b"\x00\x85\xff\xfe", id="binary"),
        pytest.param("", id="empty"),
    ],
)
def test_a_bad_kubeconfig_is_one_line_naming_the_file(text, tmp_path):
    path = tmp_path / "kubeconfig"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    with pytest.raises(ValueError) as caught:
        api_client(kubeconfig=str(path))
    message = str(caught.value)
    assert message.startswith(f"cannot configure the Kubernetes client from {path}: ")
    assert "\n" not in message
    assert "object is not" not in message  # not Python's ("'int' object is not iterable")


@pytest.mark.parametrize("url", ["notaurl", "ftp://host", "http://", "127.0.0.1:6443"])
def test_a_url_that_is_not_http_is_refused(url):
    with pytest.raises(ValueError, match=f"--kube-url {url}: not an http:// or https:// URL"):
        api_client(url=url)


def test_an_http_url_is_taken_as_it_is():
    assert api_client(url="http://127.0.0.1:8001").configuration.host == "http://127.0.0.1:8001"
