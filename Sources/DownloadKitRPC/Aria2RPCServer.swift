import DownloadKit
import DownloadKitManager
import Foundation
import Hummingbird
import HTTPClient
import HummingbirdWebSocket
import Logging
import NIOCore
import ServiceLifecycle

/// The aria2 JSON-RPC listener: `POST /jsonrpc` and a WebSocket at `/jsonrpc` (with notifications),
/// served by Hummingbird over an ``Aria2RPCService``. Loopback only unless `listenAll`.
///
/// ```swift
/// let server = Aria2RPCServer(manager: manager, host: "127.0.0.1", port: 6800, secret: "s3cret")
/// try await server.run()          // until shutdown() or SIGTERM/SIGINT
/// ```
public final class Aria2RPCServer: Sendable {
    /// Why a server could not be set up.
    public struct ConfigurationError: Error, Sendable, CustomStringConvertible {
        public var description: String
    }

    /// The service the server feeds.
    public let service: Aria2RPCService
    /// The address listened on.
    public let host: String
    public let port: Int
    /// The running service group, and whether shutdown was asked for (before or while running).
    private let state = LockedValue<(group: ServiceGroup?, stopRequested: Bool)>((nil, false))
    /// Callers of waitUntilReady; nil once the listener runs.
    private let ready = LockedValue<[CheckedContinuation<Void, Never>]?>([])
    private let logger: Logger

    /// - Parameters:
    ///   - host: The address to listen on; must be loopback (127.0.0.0/8, ::1, `localhost`) unless `listenAll`.
    ///   - listenAll: Allow a non-loopback host (aria2's `--rpc-listen-all`; `0.0.0.0` when host is nil).
    ///   - secret: aria2's `--rpc-secret`.
    /// - Throws: ``ConfigurationError`` for a non-loopback host without `listenAll`.
    public init(
        manager: DownloadManager, host: String? = nil, port: Int = 6800, secret: String? = nil, listenAll: Bool = false,
        limits: RPCLimits = RPCLimits(), logger: Logger = Logger(label: "DownloadKit.RPC")
    ) throws {
        let chosen = host ?? (listenAll ? "0.0.0.0" : "127.0.0.1")
        guard listenAll || Self.isLoopback(chosen) else {
            throw ConfigurationError(
                description: "refusing to listen on \(chosen): not a loopback address (use --rpc-listen-all)")
        }
        self.host = chosen
        self.port = port
        self.service = Aria2RPCService(manager: manager, secret: secret, limits: limits)
        self.logger = logger
    }

    /// Whether `host` is a loopback address (127.0.0.0/8, ::1, localhost).
    public static func isLoopback(_ host: String) -> Bool {
        if host == "localhost" || host == "::1" || host == "[::1]" { return true }
        let parts = host.split(separator: ".", omittingEmptySubsequences: false)
        return parts.count == 4 && parts[0] == "127" && parts.allSatisfy { UInt8($0) != nil }
    }

    /// Serves until ``shutdown()`` (or SIGTERM/SIGINT when `handlesSignals`), then stops the service.
    public func run(handlesSignals: Bool = false) async throws {
        await service.start()
        let service = self.service
        let maxBytes = service.limits.maxBytes
        let router = Router(context: BasicWebSocketRequestContext.self)
        router.post("/jsonrpc") { request, _ -> Response in
            let body: ByteBuffer
            do {
                body = try await request.body.collect(upTo: maxBytes)
            } catch {
                let failure = RPCResponse.failure(id: .null, error: .tooLarge(maxBytes))
                return Self.response(Data(failure.serialized.utf8), status: .contentTooLarge)
            }
            let reply = await service.handle(Data(buffer: body))
            return Self.response(reply, status: .ok)
        }
        router.on("/jsonrpc", method: .options) { _, _ -> Response in
            var headers = HTTPFields()
            headers[.accessControlAllowOrigin] = "*"
            headers[.accessControlAllowMethods] = "POST, GET, OPTIONS"
            headers[.accessControlAllowHeaders] = "Content-Type"
            return Response(status: .ok, headers: headers)
        }
        router.ws("/jsonrpc") { inbound, outbound, _ in
            let notifications = await service.notifications()
            let sender = Task {
                for await frame in notifications {
                    try? await outbound.write(.text(frame))
                }
            }
            defer { sender.cancel() }
            for try await message in inbound.messages(maxSize: maxBytes) {
                let data: Data
                switch message {
                case .text(let text): data = Data(text.utf8)
                case .binary(let buffer): data = Data(buffer: buffer)
                }
                let reply = await service.handle(data)
                try await outbound.write(.text(String(decoding: reply, as: UTF8.self)))
            }
        }
        let readiness = ready
        let app = Application(
            router: router,
            server: .http1WebSocketUpgrade(
                webSocketRouter: router, configuration: .init(ws: .init(maxFrameSize: max(1 << 14, maxBytes)))),
            configuration: .init(address: .hostname(host, port: port), serverName: "DownloadKit"),
            onServerRunning: { _ in
                for waiter in readiness.withLock({ current -> [CheckedContinuation<Void, Never>] in
                    let waiters = current ?? []
                    current = nil
                    return waiters
                }) { waiter.resume() }
            },
            logger: logger
        )
        let serviceGroup = ServiceGroup(
            configuration: .init(
                services: [app], gracefulShutdownSignals: handlesSignals ? [.sigterm, .sigint] : [], logger: logger))
        let alreadyStopped = state.withLock { current -> Bool in
            current.group = serviceGroup
            return current.stopRequested
        }
        if !alreadyStopped {
            do {
                try await serviceGroup.run()
            } catch {
                await service.stop()
                throw error
            }
        }
        await service.stop()
    }

    /// Waits until the listener accepts connections.
    public func waitUntilReady() async {
        await withCheckedContinuation { continuation in
            let resumeNow = ready.withLock { current -> Bool in
                guard current != nil else { return true }
                current!.append(continuation)
                return false
            }
            if resumeNow { continuation.resume() }
        }
    }

    /// Stops the listener (open connections are closed) and makes ``run(handlesSignals:)`` return.
    public func shutdown() async {
        let serviceGroup = state.withLock { current -> ServiceGroup? in
            current.stopRequested = true
            return current.group
        }
        await serviceGroup?.triggerGracefulShutdown()
    }

    private static func response(_ body: Data, status: HTTPResponse.Status) -> Response {
        var headers = HTTPFields()
        headers[.contentType] = "application/json-rpc"
        headers[.accessControlAllowOrigin] = "*"
        return Response(status: status, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(data: body)))
    }
}
