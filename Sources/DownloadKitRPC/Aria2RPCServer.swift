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
/// served by Hummingbird over an ``Aria2RPCService``. Loopback only unless `listenAll` (and then only with
/// a secret); every request passes ``RPCAccessPolicy`` (Origin, Host, CORS) first.
///
/// ```swift
/// let server = Aria2RPCServer(manager: manager, host: "127.0.0.1", port: 6800, secret: "s3cret")
/// try await server.run()          // until shutdown() or SIGTERM/SIGINT
/// ```
public final class Aria2RPCServer: Sendable {
    /// Why a server could not be set up.
    public struct ConfigurationError: Error, Sendable, CustomStringConvertible {
        /// The command-line option that fixes it (`--rpc-listen-all`, `--rpc-secret`).
        public var option: String
        public var description: String
    }

    /// The service the server feeds.
    public let service: Aria2RPCService
    /// The address listened on.
    public let host: String
    public let port: Int
    /// Who may call (Origin and Host rules, CORS).
    public let policy: RPCAccessPolicy
    /// The running service group and the task running it, whether shutdown was asked for (before or
    /// while running), and whether `aria2.shutdown`/`forceShutdown` asked for it.
    private let state = LockedValue<(group: ServiceGroup?, serving: Task<Void, any Error>?, stopRequested: Bool, stoppedOverRPC: Bool)>(
        (nil, nil, false, false))
    /// Callers of waitUntilReady; nil once the listener runs.
    private let ready = LockedValue<[CheckedContinuation<Void, Never>]?>([])
    private let logger: Logger

    /// - Parameters:
    ///   - host: The address to listen on; must be loopback (127.0.0.0/8, ::1, `localhost`) unless `listenAll`.
    ///   - listenAll: Allow a non-loopback host (aria2's `--rpc-listen-all`; `0.0.0.0` when host is nil).
    ///   - secret: aria2's `--rpc-secret`.
    ///   - allowOriginAll: aria2's `--rpc-allow-origin-all`: answers carry `Access-Control-Allow-Origin: *`
    ///     (pages of any origin read them; they still need the secret to call).
    /// - Throws: ``ConfigurationError`` for a non-loopback host without `listenAll`, or without a secret.
    public init(
        manager: DownloadManager, host: String? = nil, port: Int = 6800, secret: String? = nil, listenAll: Bool = false,
        allowOriginAll: Bool = false, limits: RPCLimits = RPCLimits(), logger: Logger = Logger(label: "DownloadKit.RPC")
    ) throws {
        let chosen = try Self.checkedAddress(host: host, listenAll: listenAll, hasSecret: secret != nil)
        self.host = chosen
        self.port = port
        self.policy = RPCAccessPolicy(
            boundHost: chosen, port: port, hasSecret: secret != nil, allowOriginAll: allowOriginAll)
        self.service = Aria2RPCService(manager: manager, secret: secret, limits: limits)
        self.logger = logger
    }

    /// The address a listener with these settings binds: `host`, else 127.0.0.1 (0.0.0.0 with `listenAll`).
    /// - Throws: ``ConfigurationError`` for a non-loopback address without `listenAll` (option
    ///   `--rpc-listen-all`) or without a secret (option `--rpc-secret`).
    public static func checkedAddress(
        host: String?, listenAll: Bool, hasSecret: Bool
    ) throws(ConfigurationError) -> String {
        let chosen = host ?? (listenAll ? "0.0.0.0" : "127.0.0.1")
        guard listenAll || isLoopback(chosen) else {
            throw ConfigurationError(
                option: "--rpc-listen-all",
                description: "refusing to listen on \(chosen): not a loopback address (use --rpc-listen-all)")
        }
        guard isLoopback(chosen) || hasSecret else {
            throw ConfigurationError(
                option: "--rpc-secret",
                description: "refusing to listen on \(chosen) without --rpc-secret: any host that reaches it could "
                    + "download to any path (give the secret with --rpc-secret-file or \(RPCSecret.environmentVariable))")
        }
        return chosen
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
        await service.setShutdownHandler { [weak self] force in
            guard let self else { return }
            self.state.withLock { $0.stoppedOverRPC = true }
            // Asked by a message a route answers: that route stops the listener once the answer is written
            // (closing first would lose the caller's `OK`). Asked any other way: at once.
            if let stop = Self.requestedStop {
                stop.withLock { $0 = ($0 ?? false) || force }
            } else {
                Task { await self.shutdown(force: force) }
            }
        }
        let maxBytes = service.limits.maxBytes
        let router = Router(context: BasicWebSocketRequestContext.self)
        router.add(middleware: AccessMiddleware(policy: policy))
        router.post("/jsonrpc") { request, _ -> Response in
            let body: ByteBuffer
            do {
                body = try await request.body.collect(upTo: maxBytes)
            } catch {
                let failure = RPCResponse.failure(id: .null, error: .tooLarge(maxBytes))
                return Self.response(Data(failure.serialized.utf8), status: .contentTooLarge)
            }
            let (reply, delivered) = await self.answer { await service.reply(to: Data(buffer: body)) }
            return Self.response(reply.body, status: HTTPResponse.Status(code: reply.httpStatus), then: delivered)
        }
        router.on("/jsonrpc", method: .options) { _, _ -> Response in
            // The middleware adds the CORS headers when the policy allows them (--rpc-allow-origin-all).
            Response(status: .ok)
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
                let (reply, delivered) = await self.answer { await service.handle(data) }
                defer { delivered?() }
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
            // In its own task, so that forceShutdown can cancel it (a shutdown in between still stops it
            // gracefully through the group).
            let serving = Task { try await serviceGroup.run() }
            state.withLock { $0.serving = serving }
            do {
                try await withTaskCancellationHandler {
                    try await serving.value
                } onCancel: {
                    serving.cancel()
                }
            } catch where serving.isCancelled {
                // Forced (or the caller was cancelled): the listener is closed either way.
            } catch {
                await service.stop()
                throw error
            }
        }
        await service.stop()
    }

    /// Whether the listener stopped because a caller asked with `aria2.shutdown` or `aria2.forceShutdown`
    /// (its owner then stops what it serves, as on SIGTERM).
    public var stoppedOverRPC: Bool { state.withLock { $0.stoppedOverRPC } }

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

    /// How long ``shutdown(force:)`` with `force` lets requests in flight finish before it cancels the listener.
    public static let forceGrace: Duration = .milliseconds(500)

    /// How long the listener waits at most for the answer of an `aria2.shutdown` (or `forceShutdown`) to be
    /// written before it stops anyway: a safety net for an answer never written; the stop normally follows
    /// the write at once.
    public static let deliveryDeadline: Duration = .seconds(5)

    /// The stop asked by the calls of the message being answered on this task (nil: none; true: forced),
    /// set by the shutdown handler; bound by ``answer(_:)`` around the service's work.
    @TaskLocal private static var requestedStop: LockedValue<Bool?>?

    /// Runs `produce` (the service answering one message). When a call of the message asked the listener to
    /// stop, also returns what to call once the answer is written (or its write failed): that stops the
    /// listener; ``deliveryDeadline`` later it stops anyway.
    private func answer<Answer>(
        _ produce: () async -> Answer
    ) async -> (Answer, delivered: (@Sendable () -> Void)?) {
        let requested = LockedValue<Bool?>(nil)
        let answer = await Self.$requestedStop.withValue(requested) { await produce() }
        guard let force = requested.withLock({ $0 }) else { return (answer, nil) }
        let stopped = LockedValue(false)
        let stop: @Sendable () -> Void = { [weak self] in
            guard stopped.withLock({ done in defer { done = true }; return !done }) else { return }
            Task { await self?.shutdown(force: force) }
        }
        let safetyNet = Task {
            guard (try? await Task.sleep(for: Self.deliveryDeadline)) != nil else { return }
            stop()
        }
        return (answer, { safetyNet.cancel(); stop() })
    }

    /// Stops the listener (open connections are closed) and makes ``run(handlesSignals:)`` return.
    /// - Parameter force: Cancel the listener after ``forceGrace`` instead of waiting as long as
    ///   requests in flight take (`aria2.forceShutdown`).
    public func shutdown(force: Bool = false) async {
        let (serviceGroup, serving) = state.withLock { current -> (ServiceGroup?, Task<Void, any Error>?) in
            current.stopRequested = true
            return (current.group, current.serving)
        }
        await serviceGroup?.triggerGracefulShutdown()
        if force, let serving {
            // What is still open after a moment (a long request, a slow client) is cut off.
            Task {
                try? await Task.sleep(for: Self.forceGrace)
                serving.cancel()
            }
        }
    }

    /// A JSON-RPC answer; `then` (if any) runs once its body is written, or its write failed.
    static func response(_ body: Data, status: HTTPResponse.Status, then: (@Sendable () -> Void)? = nil) -> Response {
        var headers = HTTPFields()
        headers[.contentType] = "application/json-rpc"
        let buffer = ByteBuffer(data: body)
        guard let then else { return Response(status: status, headers: headers, body: ResponseBody(byteBuffer: buffer)) }
        return Response(
            status: status, headers: headers,
            body: ResponseBody(contentLength: buffer.readableBytes) { writer in
                defer { then() }
                try await writer.write(buffer)
                try await writer.finish(nil)
            })
    }
}

/// Applies ``RPCAccessPolicy`` to every request (POST, the WebSocket upgrade's GET, OPTIONS) before its
/// handler runs: a refused one gets 403 with a JSON-RPC error and no CORS header; an allowed one gets the
/// CORS headers the policy decides.
struct AccessMiddleware<Context: RequestContext>: RouterMiddleware {
    let policy: RPCAccessPolicy

    func handle(
        _ request: Request, context: Context, next: (Request, Context) async throws -> Response
    ) async throws -> Response {
        let origin = request.headers[.origin]
        let host = request.head.authority  // HTTP/1.1's Host header (swift-http-types keeps it here)
        switch policy.decide(origin: origin, host: host) {
        case .refuse(let reason):
            let failure = RPCResponse.failure(id: .null, error: RPCError(code: -32600, message: "Forbidden: \(reason)"))
            return Aria2RPCServer.response(Data(failure.serialized.utf8), status: .forbidden)
        case .allow(let corsOrigin):
            var response = try await next(request, context)
            if let corsOrigin {
                response.headers[.accessControlAllowOrigin] = corsOrigin
                if request.method == .options {
                    response.headers[.accessControlAllowMethods] = "POST, GET, OPTIONS"
                    response.headers[.accessControlAllowHeaders] = "Content-Type"
                }
            }
            return response
        }
    }
}

/// Who may use an RPC listener, as a browser's security model expects (docs/RPC.md, "Browsers"). Pure.
///
/// - **Host** (DNS rebinding: a page of `evil.example` whose name resolves to 127.0.0.1 is same-origin
///   with the listener): must name the listener — `localhost`, `127.0.0.1`, `::1` or the bound address,
///   with our port or none. A listener on a non-loopback address (it has a secret, the server refuses
///   to start otherwise) takes any Host: clients reach it by names it cannot know, and the token guards
///   every call there.
/// - **Origin**: none (curl, aria2p, any non-browser client) or the listener's own origin is always
///   allowed. A foreign origin (any web page, POST or WebSocket) is refused without a secret; with a
///   secret it may call (AriaNg), as every call must carry the token.
/// - **CORS**: `Access-Control-Allow-Origin: *` only with `allowOriginAll` (aria2's
///   `--rpc-allow-origin-all`); otherwise a page of another origin cannot read POST answers. WebSocket
///   has no CORS: there the token is the guard.
public struct RPCAccessPolicy: Sendable, Hashable {
    public var boundHost: String
    public var port: Int
    public var hasSecret: Bool
    public var allowOriginAll: Bool

    public init(boundHost: String, port: Int, hasSecret: Bool, allowOriginAll: Bool) {
        self.boundHost = boundHost
        self.port = port
        self.hasSecret = hasSecret
        self.allowOriginAll = allowOriginAll
    }

    /// What to do with one request.
    public enum Decision: Sendable, Hashable {
        /// Serve it; add `Access-Control-Allow-Origin: corsOrigin` when not nil.
        case allow(corsOrigin: String?)
        /// Answer 403 with this reason.
        case refuse(String)
    }

    /// The names the listener answers to (lowercased, IPv6 without brackets).
    var ownNames: Set<String> {
        var names: Set<String> = ["localhost", "127.0.0.1", "::1"]
        names.insert(Self.unbracketed(boundHost.lowercased()))
        return names
    }

    /// Whether the listener is on a non-loopback address.
    var isExposed: Bool { !Aria2RPCServer.isLoopback(boundHost) }

    /// The decision for a request with these `Origin` and `Host` header values.
    public func decide(origin: String?, host: String?) -> Decision {
        if let host, !(isExposed && hasSecret), !namesUs(authority: host) {
            return .refuse("Host \(host) is not this listener's name (DNS rebinding)")
        }
        guard let origin else { return .allow(corsOrigin: allowOriginAll ? "*" : nil) }
        if isOwn(origin: origin) { return .allow(corsOrigin: allowOriginAll ? "*" : nil) }
        guard hasSecret else {
            return .refuse("requests from origin \(origin) are refused without --rpc-secret")
        }
        return .allow(corsOrigin: allowOriginAll ? "*" : nil)
    }

    /// Whether `authority` (`name`, `name:port`, `[v6]`, `[v6]:port`) names this listener.
    func namesUs(authority: String) -> Bool {
        let text = authority.lowercased()
        var name = text
        var portText: Substring?
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]") else { return false }
            name = String(text[text.index(after: text.startIndex)..<close])
            let rest = text[text.index(after: close)...]
            if !rest.isEmpty {
                guard rest.hasPrefix(":") else { return false }
                portText = rest.dropFirst()
            }
        } else if let colon = text.firstIndex(of: ":") {
            name = String(text[..<colon])
            portText = text[text.index(after: colon)...]
        }
        if let portText, Int(portText) != port { return false }
        return ownNames.contains(name)
    }

    /// Whether `origin` is `http://` + one of our names + our port (a page the listener itself served).
    func isOwn(origin: String) -> Bool {
        let text = origin.lowercased()
        guard text.hasPrefix("http://") else { return false }
        let authority = text.dropFirst("http://".count)
        guard !authority.isEmpty, !authority.contains("/"), authority.hasSuffix(":\(port)") || port == 80 else { return false }
        return namesUs(authority: String(authority))
    }

    private static func unbracketed(_ host: String) -> String {
        host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
    }
}
