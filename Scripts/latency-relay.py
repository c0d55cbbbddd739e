#!/usr/bin/env python3
"""A TCP relay that adds a fixed one-way delay in each direction: a stand-in for a real path's round
trip, for measuring by hand what waits cost (this VM has no netem). Bytes are forwarded as they come,
each chunk released `delay` after it was read, so the relay delays without throttling.

usage: latency-relay.py LISTEN_PORT TARGET_PORT ONE_WAY_MS   (both on 127.0.0.1)
"""
import asyncio
import sys
import time


async def pump(reader, writer, delay):
    queue = asyncio.Queue()

    async def release():
        while True:
            due, data = await queue.get()
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            if not data:
                writer.write_eof() if writer.can_write_eof() else writer.close()
                return
            writer.write(data)
            await writer.drain()

    sender = asyncio.ensure_future(release())
    try:
        while True:
            data = await reader.read(256 << 10)
            await queue.put((time.monotonic() + delay, data))
            if not data:
                break
        await sender
    except (ConnectionError, asyncio.CancelledError):
        sender.cancel()
        writer.close()


async def main(listen, target, delay):
    async def accept(client_reader, client_writer):
        try:
            server_reader, server_writer = await asyncio.open_connection("127.0.0.1", target)
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(
            pump(client_reader, server_writer, delay), pump(server_reader, client_writer, delay),
            return_exceptions=True)
        client_writer.close()
        server_writer.close()

    server = await asyncio.start_server(accept, "127.0.0.1", listen, reuse_address=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]) / 1000))
