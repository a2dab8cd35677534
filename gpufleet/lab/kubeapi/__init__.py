"""A fake Kubernetes API server for tests and the lab: real REST over real loopback HTTP.

`resources` lists what it serves; `objects` holds the API's pure semantics (patches,
selectors, `Scale`, `Status` errors); `store` the objects with resourceVersion, uid and
generation bookkeeping and a window of watch events; `server` the aiohttp server, its
discovery documents and fault modes; `watch` its `?watch=1` streams. The official
`kubernetes` client and kubectl talk to it as to a kube-apiserver, so serialization and URL
paths are tested for real. No real kube-apiserver can be installed here (no Debian, PyPI or
npm package carries one).
"""
