"""The TCP listener: accepts connections and runs each in its own task."""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import TYPE_CHECKING

from kbroker.server.connection import ClientConnection

if TYPE_CHECKING:
    from kbroker.broker import Broker

log = logging.getLogger("kbroker.server")


class Server:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self._servers: list[asyncio.Server] = []
        self._connections: set[asyncio.Task[None]] = set()

    async def start(self, host: str, port: int) -> int:
        """Listen on host:port (0 picks a free port); returns the bound port."""
        server = await asyncio.start_server(self._accept, host or None, port, reuse_address=True, limit=1 << 20)
        self._servers.append(server)
        return server.sockets[0].getsockname()[1]

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            await ClientConnection(self.broker, reader, writer).run()
        except (ConnectionError, OSError):
            pass
        except asyncio.CancelledError:
            pass  # `stop` cancels connections; letting it escape makes asyncio's stream callback log it
        except Exception:
            log.exception("connection failed")
        finally:
            self._connections.discard(task)

    async def stop(self) -> None:
        for server in self._servers:
            server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        for server in self._servers:
            await server.wait_closed()
