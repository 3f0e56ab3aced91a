"""Joining a Ray cluster, or starting a local Ray, with every failure of the way in one line of ours.

An address is checked before ray.init, which otherwise waits 20-60 s and ends in a generic ConnectionError:
something listens there (a TCP connection within CONNECT_S), speaks gRPC (the HTTP/2 hello within ANSWER_S), and
answers a Ray hello: the GCS's GetClusterId for HOST:PORT, the Ray Client server's ping for ray://HOST:PORT. The
hello carries this machine's token as Ray would send it, so an authentication failure is named with its cure
(RAY_AUTH_MODE=token and the head's token), and a Ray Client port given without ray:// (or a cluster's address
given with it) is refused with the form to use.

Without an address the engine starts its own local Ray (ray.init(address="local")): Ray's own ray.init() would
join any cluster a `ray start` left on this machine instead. Ray's own logging is kept to warnings, and the
workers' output is not forwarded, unless --verbose.
"""
import contextlib
import logging
import os
import socket
from pathlib import Path

from errors import DataError

EXTRA = "pip install -e '.[ray]', or pip install -r requirements-ray.lock"
CONNECT_S = 10  # an address must take a connection within this, and answer the gRPC hello within ANSWER_S:
ANSWER_S = 5  # ray.init itself waits a minute or more where nothing listens
ROOT = Path(__file__).resolve().parents[1]  # the checkout, put on every worker's import path
CLIENT_PORT = 10001  # the Ray Client server's port that `ray start --head` opens by default
FLUSH_ENV = "RAY_task_events_shutdown_flush_timeout_ms"  # read by ray.init
# Ray Client retries a dropped connection inside each call for 30 s, where the engine's watch cannot step in: 3 s
# here, then the call's ConnectionError is the watch's lost cluster (read by ray.init; a user's own setting is kept)
CLIENT_GRACE_ENV, CLIENT_GRACE_S = "RAY_CLIENT_RECONNECT_GRACE_PERIOD", 3
# Ray's loggers that speak at warning level where nothing is wrong: a local Ray started here turns token
# authentication on and says so at every start; shown with --verbose
NOISY = ("ray._private.authentication.authentication_token_setup",)


def import_ray():
    """The ray module, or one line naming the extra to install."""
    try:
        # late: an optional dependency (the 'ray' extra); the local engine and --help never load it
        import ray
    except ImportError:
        raise DataError(f"--engine ray needs Ray, which is not installed: install the 'ray' extra ({EXTRA})") from None
    return ray


def first_line(e) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def split_address(address, flag="--ray-address"):
    """(host, port, client) of HOST:PORT or ray://HOST:PORT, or one line saying what is expected."""
    scheme, sep, rest = address.rpartition("://")
    if sep and scheme != "ray":
        raise DataError(f"{flag} {address}: expected HOST:PORT (the address `ray start --head` prints) or "
                        f"ray://HOST:{CLIENT_PORT} (a Ray Client connection), not {scheme}://")
    host, sep, port = rest.rpartition(":")
    if not (sep and host and port.isdigit()):
        raise DataError(f"{flag} {address}: expected HOST:PORT, the address `ray start --head` prints, or auto")
    return host.strip("[]"), int(port), bool(scheme)


def check_address(address, flag="--ray-address"):
    """HOST:PORT (or ray://HOST:PORT) answers as a Ray cluster (or a Ray Client server) that takes this machine's
    token, within CONNECT_S + ANSWER_S seconds, or one line saying what is wrong ('auto' and 'local' are Ray's own
    words and are left to it)."""
    if address in ("auto", "local"):
        return
    host, port, client = split_address(address, flag)
    try:
        with socket.create_connection((host, port), timeout=CONNECT_S) as sock:
            tls = os.environ.get("RAY_USE_TLS", "0") not in ("0", "")
            grpc = tls or speaks_http2(sock)
    except OSError as e:
        why = e.strerror or type(e).__name__
        raise DataError(f"{flag} {address}: no Ray cluster answers there ({why}); start its head with "
                        "`ray start --head`, or leave the address out for a local Ray") from None
    if not grpc:
        raise DataError(f"{flag} {address}: something answers there but it is no Ray cluster (no gRPC); give the "
                        "address `ray start --head` prints (port 6379 by default; the dashboard's 8265 is not it)")
    if not tls:  # the hello below is a plain-text channel: with TLS, ray.init's own checks are left to speak
        hello(host, port, client, address, flag)


# the HTTP/2 client preface and an empty SETTINGS frame: a gRPC server answers with its own SETTINGS frame
HTTP2_HELLO = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])


def speaks_http2(sock) -> bool:
    """The peer answers the HTTP/2 preface with a SETTINGS frame (frame type 4) within ANSWER_S seconds."""
    sock.settimeout(ANSWER_S)
    sock.sendall(HTTP2_HELLO)
    head = b""
    try:
        while len(head) < 9:
            chunk = sock.recv(9 - len(head))
            if not chunk:
                break
            head += chunk
    except socket.timeout:
        return False
    return len(head) == 9 and head[3] == 4


def hello(host, port, client, address, flag):
    """Ray's own first call, with this machine's token as Ray would send it: the GCS's GetClusterId, or for
    ray:// the Ray Client server's ping. One line for a refused token, or for the wrong kind of port."""
    # late: gRPC and Ray's generated stubs come with Ray, the optional 'ray' extra
    import grpc
    from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc, ray_client_pb2, ray_client_pb2_grpc

    with grpc.insecure_channel(f"{host}:{port}") as channel:
        try:
            if client:
                ping = ray_client_pb2.ClusterInfoRequest(type=ray_client_pb2.ClusterInfoType.PING)
                ray_client_pb2_grpc.RayletDriverStub(channel).ClusterInfo(ping, timeout=ANSWER_S, metadata=token_header())
            else:
                gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel).GetClusterId(
                    gcs_service_pb2.GetClusterIdRequest(), timeout=ANSWER_S, metadata=token_header())
        except grpc.RpcError as e:
            code = e.code()
            if code == grpc.StatusCode.UNIMPLEMENTED and not client and answers_as_client(channel):
                code = "client port"
            raise DataError(refusal(code, grpc.StatusCode, client, address, host, port, flag)) from None


def answers_as_client(channel) -> bool:
    """The Ray Client server's ping gets an answer, or a refusal of the token: this port is a Ray Client's."""
    # late: gRPC and Ray's generated stubs come with Ray, the optional 'ray' extra
    import grpc
    from ray.core.generated import ray_client_pb2, ray_client_pb2_grpc

    ping = ray_client_pb2.ClusterInfoRequest(type=ray_client_pb2.ClusterInfoType.PING)
    try:
        ray_client_pb2_grpc.RayletDriverStub(channel).ClusterInfo(ping, timeout=ANSWER_S, metadata=token_header())
    except grpc.RpcError as e:
        return e.code() == grpc.StatusCode.UNAUTHENTICATED
    return True


def token_mode() -> bool:
    return os.environ.get("RAY_AUTH_MODE", "").lower() == "token"


def token_header():
    """The authorization metadata ray.init will send: the token Ray reads (RAY_AUTH_TOKEN, the file at
    RAY_AUTH_TOKEN_PATH, or ~/.ray/auth_token), in token mode only."""
    if not token_mode():
        return ()
    # late: Ray is the optional 'ray' extra; its own loader, so the token is the one ray.init will send
    from ray._raylet import AuthenticationTokenLoader

    return tuple(AuthenticationTokenLoader.instance().get_token_for_http_header().items())


def token_source() -> str:
    if os.environ.get("RAY_AUTH_TOKEN"):
        return "RAY_AUTH_TOKEN"
    return os.environ.get("RAY_AUTH_TOKEN_PATH") or "~/.ray/auth_token"


def refusal(code, codes, client, address, host, port, flag) -> str:
    """The one line for a Ray hello that failed with gRPC status `code`."""
    if code == codes.UNAUTHENTICATED:
        if not token_mode():
            return (f"{flag} {address}: the cluster asks for a token (Ray's token authentication): export "
                    "RAY_AUTH_MODE=token on this machine, with the head's token (its ~/.ray/auth_token) in "
                    "~/.ray/auth_token here or in RAY_AUTH_TOKEN")
        if not token_header():
            return (f"{flag} {address}: RAY_AUTH_MODE=token but this machine has no token: copy the head's "
                    "~/.ray/auth_token to ~/.ray/auth_token here, or set RAY_AUTH_TOKEN to it")
        return (f"{flag} {address}: the cluster refused this machine's token (RAY_AUTH_MODE=token, the token from "
                f"{token_source()}): use the head's, from its ~/.ray/auth_token")
    if code == codes.UNIMPLEMENTED and client:
        return (f"{flag} {address}: ray:// is the form for a Ray Client port ({CLIENT_PORT} by default), and this is "
                f"a cluster's own address: give {host}:{port} without ray://")
    if code == "client port":
        return (f"{flag} {address}: this is a Ray Client port (`ray start --head` opens one on {CLIENT_PORT}), not "
                f"the cluster's address: give ray://{host}:{port} for a Ray Client connection, or the address "
                "`ray start --head` prints (HOST:6379)")
    return (f"{flag} {address}: something answers there in gRPC but not as a Ray cluster ({code.name}); give the "
            f"address `ray start --head` prints (port 6379 by default), or ray://HOST:{CLIENT_PORT} for its Ray Client")


def start(ray, address, flag, verbose=False):
    """ray.init: join the cluster at `address`, or start a local Ray of our own on this machine's cores (never
    one that happens to be running here); Ray's logging at warning level and no worker output unless verbose."""
    path = [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    kw = {"runtime_env": {"env_vars": {"PYTHONPATH": os.pathsep.join(path)}},
          "logging_level": logging.INFO if verbose else logging.WARNING, "log_to_driver": verbose}
    if address:
        kw["address"] = address
    else:
        kw.update(address="local", include_dashboard=False)
    # a driver's last task events (for Ray's state API) get 1 s to reach the cluster at ray.shutdown, not Ray's 5 s:
    # after a lost cluster they never arrive, and the line that says so should not wait for them
    os.environ.setdefault(FLUSH_ENV, "1000")
    if address and address.startswith("ray://"):
        os.environ.setdefault(CLIENT_GRACE_ENV, str(CLIENT_GRACE_S))
    try:
        with quiet(verbose):
            ray.init(**kw)
    except (ConnectionError, RuntimeError, ValueError, TimeoutError) as e:
        where = f"{flag} {address}" if address else "a local Ray"
        if isinstance(e, ConnectionAbortedError) and address and address.startswith("ray://"):
            raise DataError(f"{where}: {client_session_refused(e)}") from None
        raise DataError(f"{where}: Ray could not start or connect ({type(e).__name__}: {first_line(e)})") from None


def client_session_refused(e):
    """What to say when the head's Ray Client server answered the hello but opened no session for this driver:
    ConnectionAbortedError("Initialization failure from server:" and the server's traceback). The proxy sends one
    when it cannot reach the session's own server process (after 30 s; its last line names the logs) or the head's
    runtime-env agent (six tries, about 31 s), and the session's server sends one when its ray.init fails. Seen
    once, 2026-12-07: the micro study's ray.init through ray:// about 10 s after the test cluster started, refused
    40 s later (the line then showed only Ray's first line); it connected at once in every later try."""
    said = [ln.strip() for ln in str(e).splitlines()[1:] if ln.strip()]
    why = said[-1] if said else "it gave no reason"  # a traceback's last line names the error
    logs = "" if ".err" in why else ("; the head's Ray logs say more (ray_client_server*.err in its session folder, "
                                     "/tmp/ray/session_latest/logs by default)")
    return f"the head's Ray Client server opened no session for this driver ({why}){logs}; a rerun may connect"


@contextlib.contextmanager
def quiet(verbose):
    """NOISY's loggers at error level for the block, unless verbose."""
    loggers = [] if verbose else [logging.getLogger(n) for n in NOISY]
    saved = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for lg, level in zip(loggers, saved):
            lg.setLevel(level)
