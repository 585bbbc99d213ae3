"""The broker's route to the active controller (:class:`~pyspark_kafka.broker.controller.channel.ControllerRouter`)
on real 127.0.0.1 sockets: two controller channels, one that never answers (a paused active controller) and one
that does (the newly elected one)."""

from __future__ import annotations

import asyncio

from pyspark_kafka.broker.controller.channel import ChannelClient, ControllerRouter, start_channel_server


def _run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


async def _two_controllers(seen: list):
    never = asyncio.Event()

    async def paused(request):  # reads the request, never answers (SIGSTOPped in the cluster test)
        seen.append(("paused", request["op"]))
        await never.wait()
        return {"error_code": 0}

    async def active(request):
        seen.append(("active", request["op"]))
        return {"error_code": 0, "from": "active"}

    servers = [await start_channel_server("127.0.0.1", 0, h) for h in (paused, active)]
    ports = [s.sockets[0].getsockname()[1] for s in servers]
    return servers, {1: ("127.0.0.1", ports[0]), 2: ("127.0.0.1", ports[1])}


def test_a_call_stuck_on_the_old_controller_moves_to_the_new_quorum_leader_at_once():
    # Issue 25: a heartbeat waited up to 5 s on the paused controller while the new one, which had given every
    # broker a fresh session, fenced the broker. The call's whole budget here (3 s) is below the 5 s a single
    # controller is waited on, so the old code raised ConnectionError; the router must answer from node 2.
    async def main():
        seen = []
        servers, channels = await _two_controllers(seen)
        view = {"leader": (1, 1)}
        router = ControllerRouter(channels, lambda: view["leader"])
        try:
            call = asyncio.ensure_future(router.call({"op": "heartbeat"}, timeout_s=3))
            while ("paused", "heartbeat") not in seen:  # the request reached the paused controller
                await asyncio.sleep(0.01)
            view["leader"] = (2, 2)  # the broker's Raft observer learns of the new leader
            answer = await call
            assert answer == {"error_code": 0, "from": "active"}
            assert router.active == 2
            assert seen == [("paused", "heartbeat"), ("active", "heartbeat")]
        finally:
            router.close()
            for s in servers:
                s.close()

    _run(main())


def test_a_call_to_the_observed_leader_is_not_abandoned_while_the_view_is_unchanged():
    # The observed leader (1) is the node being waited on and the view never moves: the call is not abandoned for
    # the other controller; it waits its whole time and fails.
    async def main():
        seen = []
        servers, channels = await _two_controllers(seen)
        router = ControllerRouter(channels, lambda: (1, 1))
        try:
            try:
                await router.call({"op": "heartbeat"}, timeout_s=0.5)
            except ConnectionError as exc:
                assert "within 0.5 s" in str(exc) or "did not answer" in str(exc)
            else:
                raise AssertionError("a controller that never answers gave an answer")
            assert seen == [("paused", "heartbeat")]
        finally:
            router.close()
            for s in servers:
                s.close()

    _run(main())


def test_a_cancelled_call_closes_its_connection_so_a_late_answer_is_never_read_as_the_next():
    async def main():
        release = asyncio.Event()
        n = {"i": 0}

        async def slow_then_fast(request):
            n["i"] += 1
            if request["op"] == "first":
                await release.wait()
            return {"error_code": 0, "answer_to": request["op"]}

        server = await start_channel_server("127.0.0.1", 0, slow_then_fast)
        client = ChannelClient("127.0.0.1", server.sockets[0].getsockname()[1])
        try:
            first = asyncio.ensure_future(client.call({"op": "first"}, 10))
            while n["i"] < 1:
                await asyncio.sleep(0.01)
            first.cancel()
            await asyncio.gather(first, return_exceptions=True)
            release.set()  # the server now writes the first answer on the old connection
            assert await client.call({"op": "second"}, 10) == {"error_code": 0, "answer_to": "second"}
        finally:
            client.close()
            server.close()

    _run(main())


def test_a_heartbeat_leaves_a_silent_observed_leader_after_its_attempt_timeout():
    # Issue #38: the broker's Raft observer still names the paused controller (1); the heartbeat waits on it only
    # attempt_timeout_s (the broker passes broker.heartbeat.interval.ms, as Kafka 4.4's heartbeat channel times
    # out), then the new active controller (2) answers, well within the session timeout.
    async def main():
        seen = []
        servers, channels = await _two_controllers(seen)
        router = ControllerRouter(channels, lambda: (1, 1))
        loop = asyncio.get_running_loop()
        try:
            started = loop.time()
            answer = await router.call({"op": "heartbeat"}, timeout_s=3, attempt_timeout_s=0.2)
            assert answer == {"error_code": 0, "from": "active"}
            assert loop.time() - started < 1.0
            assert seen == [("paused", "heartbeat"), ("active", "heartbeat")]
        finally:
            router.close()
            for s in servers:
                s.close()

    _run(main())
