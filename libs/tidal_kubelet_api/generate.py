"""Regenerate the Python modules of the device plugin API from its .proto
(grpcio-tools, a dev dependency): `python -m tidal_kubelet_api.generate`.
The generated modules are committed so that an install needs no compiler;
`tests/test_kubelet_api.py` fails when they drift from the .proto."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROTO = "deviceplugin_v1beta1.proto"


def generate(out: Path = HERE) -> None:
    """Write deviceplugin_v1beta1_pb2.py and _pb2_grpc.py into `out`."""
    from grpc_tools import protoc  # imported here: only regeneration needs it

    code = protoc.main(["protoc", f"-I{HERE}", f"--python_out={out}", f"--grpc_python_out={out}", str(HERE / PROTO)])
    if code != 0:
        raise SystemExit(f"protoc failed with exit code {code}")
    # protoc writes a top-level import; the modules live in this package.
    grpc_module = out / "deviceplugin_v1beta1_pb2_grpc.py"
    text = grpc_module.read_text()
    grpc_module.write_text(text.replace("import deviceplugin_v1beta1_pb2 as",
                                        "from tidal_kubelet_api import deviceplugin_v1beta1_pb2 as"))


if __name__ == "__main__":
    generate(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE)
