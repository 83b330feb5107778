"""Interop: a Python grpcio client generated from proto/warden.proto talks to
a real wardend: health check, create a session, exec a command (streamed
events), close the session.

Usage: interop.py WARDEND_BINARY PROTO_DIR
Exits non-zero on any failure (run by tests/interop.rs under cargo test).
"""
import os
import subprocess
import sys
import tempfile
import time
import unittest

WARDEND = sys.argv[1]
PROTO_DIR = sys.argv[2]


def generate(out_dir):
    from grpc_tools import protoc
    import grpc_tools
    include = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    rc = protoc.main([
        "protoc", f"-I{PROTO_DIR}", f"-I{include}",
        f"--python_out={out_dir}", f"--grpc_python_out={out_dir}",
        os.path.join(PROTO_DIR, "warden.proto"),
    ])
    if rc != 0:
        raise RuntimeError(f"protoc failed: {rc}")
    sys.path.insert(0, out_dir)


class Interop(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="wd-py-", dir="/tmp")
        generate(cls.tmp)
        cls.socket = os.path.join(cls.tmp, "run", "wardend.sock")
        cls.log = open(os.path.join(cls.tmp, "wardend.log"), "w")
        cls.daemon = subprocess.Popen(
            [WARDEND, "--socket", cls.socket, "--state-dir", os.path.join(cls.tmp, "state")],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=cls.log)
        deadline = time.time() + 30
        while not os.path.exists(cls.socket):
            if cls.daemon.poll() is not None or time.time() > deadline:
                raise RuntimeError("wardend did not start: " + open(cls.log.name).read())
            time.sleep(0.05)
        import grpc
        cls.channel = grpc.insecure_channel("unix://" + cls.socket, options=[("grpc.default_authority", "localhost")])
        grpc.channel_ready_future(cls.channel).result(timeout=30)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        cls.daemon.terminate()
        cls.daemon.wait(timeout=20)

    def test_health(self):
        from grpc_health.v1 import health_pb2, health_pb2_grpc
        stub = health_pb2_grpc.HealthStub(self.channel)
        for service in ["", "warden.v1.Exec"]:
            r = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
            self.assertEqual(r.status, health_pb2.HealthCheckResponse.SERVING)

    def test_session_and_exec(self):
        import warden_pb2 as pb
        import warden_pb2_grpc as rpc
        ws = tempfile.mkdtemp(prefix="ws-py-", dir="/tmp")
        sessions = rpc.SessionsStub(self.channel)
        s = sessions.CreateSession(pb.CreateSessionRequest(workspace=ws, policy_name="", policy_toml=""), timeout=10)
        self.assertTrue(s.id)
        self.assertEqual(s.workspace, os.path.realpath(ws))
        self.assertEqual(s.state, pb.SESSION_STATE_OPEN)
        execs = rpc.ExecStub(self.channel)
        out, err, exit_ev, kinds = b"", b"", None, []
        for ev in execs.Exec(pb.ExecRequest(session_id=s.id, command="echo hello from $0; echo oops >&2; exit 5",
                                            approve=True), timeout=60):
            kind = ev.WhichOneof("event")
            kinds.append(kind)
            if kind == "stdout":
                out += ev.stdout.data
            elif kind == "stderr":
                err += ev.stderr.data
            elif kind == "exit":
                exit_ev = ev.exit
        self.assertEqual(kinds[0], "decision")
        self.assertIn("started", kinds)
        self.assertEqual(kinds[-1], "exit")
        self.assertEqual(out, b"hello from bash\n")
        self.assertEqual(err, b"oops\n")
        self.assertEqual(exit_ev.code, 5)
        self.assertFalse(exit_ev.refused)
        closed = sessions.CloseSession(pb.CloseSessionRequest(session_id=s.id), timeout=10)
        self.assertEqual(closed.state, pb.SESSION_STATE_CLOSED)

    def test_unknown_session_is_not_found(self):
        import grpc
        import warden_pb2 as pb
        import warden_pb2_grpc as rpc
        with self.assertRaises(grpc.RpcError) as cm:
            list(rpc.ExecStub(self.channel).Exec(pb.ExecRequest(session_id="nope", command="true"), timeout=10))
        self.assertEqual(cm.exception.code(), grpc.StatusCode.NOT_FOUND)

    def test_reflection_lists_the_services(self):
        from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
        stub = reflection_pb2_grpc.ServerReflectionStub(self.channel)
        req = reflection_pb2.ServerReflectionRequest(list_services="")
        names = set()
        for resp in stub.ServerReflectionInfo(iter([req]), timeout=10):
            names |= {s.name for s in resp.list_services_response.service}
        for want in ["warden.v1.Sessions", "warden.v1.Exec", "grpc.health.v1.Health"]:
            self.assertIn(want, names)


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0], "-v"])
