import Foundation
import Glibc
import HTTPWire

/// A real HTTP/1.1 server on 127.0.0.1 with scripted misbehaviour, for tests and the demo.
///
/// It listens on an ephemeral port, accepts on its own thread and serves each connection on a thread of
/// its own with blocking sockets. Connections are kept alive (several requests each) unless the client
/// sends `Connection: close`, speaks HTTP/1.0 without keep-alive, or a fault or script ends them. Every
/// request is recorded with the connection that carried it, so tests can check connection reuse.
///
/// ```swift
/// let origin = try FaultOrigin()
/// origin.serve("/file.bin", .resource(Resource(size: 1 << 20, faults: [.resetAfter(bytes: 4096, times: 1)])))
/// // download origin.url("/file.bin") …
/// #expect(origin.requests("/file.bin").count == 2)
/// ```
///
/// `@unchecked Sendable`: the class has only immutable stored properties; all mutable state lives in an
/// internal `OriginState` whose fields are guarded by one lock (see there).
public final class FaultOrigin: @unchecked Sendable {
    private let state: OriginState

    /// The port the origin listens on (127.0.0.1).
    public let port: Int

    /// Starts listening on 127.0.0.1 on an ephemeral port and starts the accept thread.
    ///
    /// - Throws: ``OriginError`` when the socket or the thread cannot be created.
    public init() throws {
        let listener = try LoopbackListener(port: 0, backlog: 128)
        state = OriginState(listener: listener)
        port = listener.port
        // No close here when the accept thread cannot start: every stored property is set, so the
        // throw still runs deinit, whose shutdown closes the listener (closing it twice could close a
        // descriptor number another thread had just been given).
        try state.startAccepting()
    }

    deinit {
        state.shutdown()
    }

    /// `http://127.0.0.1:PORT`.
    public var baseURL: String { "http://127.0.0.1:\(port)" }

    /// `http://127.0.0.1:PORT` followed by `path` (which should start with `/`).
    public func url(_ path: String) -> String { baseURL + path }

    /// Registers `route` for `path`, replacing any earlier route for it (and resetting the request
    /// counters its faults use). Safe to call at any time, also while requests are in flight.
    ///
    /// A request matches a route registered for its exact target, or else for its target without the
    /// query string, so `serve("/file", …)` also answers `/file?signature=…`.
    public func serve(_ path: String, _ route: Route) {
        state.setRoute(route, for: path)
    }

    /// Removes the route for `path`; later requests for it get a 404.
    public func removeRoute(_ path: String) {
        state.removeRoute(path)
    }

    /// The requests received so far, in arrival order; only those for `path` (exact target, or target
    /// without its query) when given.
    public func requests(_ path: String? = nil) -> [RecordedRequest] {
        state.recordedRequests(path)
    }

    /// The number of connections accepted so far.
    public var connectionCount: Int { state.acceptedCount }

    /// The number of connections currently open.
    public var openConnectionCount: Int { state.activeCount }

    /// The most connections that were open at the same time.
    public var peakConnectionCount: Int { state.peakCount }

    /// Stops the origin: closes the listener, interrupts and closes every connection (waking blocked reads,
    /// writes and fault sleeps), and waits for the threads to finish. Idempotent; also run on deinit.
    ///
    /// A `.script` route blocked in something other than the connection's own calls cannot be woken; the
    /// wait for it gives up after 10 seconds.
    public func shutdown() {
        state.shutdown()
    }
}

/// How the origin answers requests for one path.
public enum Route: Sendable {
    /// A file with ranges, validators and faults (see ``Resource``).
    case resource(Resource)
    /// A redirect: `status` (301, 302, 303, 307, 308) with `Location: location` and an empty body.
    case redirect(status: Int, location: String)
    /// A fixed response. `Content-Length` is added unless `headers` set it or `Transfer-Encoding`.
    case response(status: Int, headers: [(String, String)], body: [UInt8])
    /// Full raw control: the closure writes whatever it likes on the connection. The connection is closed
    /// when the closure returns or throws, unless it sets ``OriginConnection/keepsAlive``.
    case script(@Sendable (RecordedRequest, OriginConnection) throws -> Void)
}

/// One request as received by a ``FaultOrigin``.
public struct RecordedRequest: Sendable {
    /// The method, e.g. `GET`.
    public var method: String
    /// The request target as sent, e.g. `/file.bin?sig=1`.
    public var target: String
    /// The protocol version, e.g. `HTTP/1.1`.
    public var version: String
    /// The header fields in order.
    public var headers: DKHTTPHeaders
    /// The connection that carried it, numbered from 1 in accept order.
    public var connectionID: Int
    /// Its position on that connection, from 0.
    public var indexOnConnection: Int
    /// Its position among all requests to the origin, from 0.
    public var sequenceNumber: Int
    /// Whether the next request on this connection had already arrived when the last piece of this
    /// request's body was about to be written: the client sent it ahead (HTTP/1.1 pipelining). Recorded
    /// for resource routes; a client that waits for a response's end can never set it.
    public var nextArrivedBeforeTheEnd = false

    /// The target without its query string.
    public var path: String {
        if let question = target.firstIndex(of: "?") { return String(target[..<question]) }
        return target
    }

    /// The first value of the header field `name` (case-insensitive), or `nil`.
    public func header(_ name: String) -> String? {
        headers.first(name: name)
    }
}

/// The mutable state of one origin, shared by the public object, the accept thread and the connection
/// threads.
///
/// `@unchecked Sendable`: `listenFD` is immutable; every `var` is read and written only while holding
/// `lock` (an `NSCondition`, also used to wake sleeps and the shutdown wait). Socket I/O and route
/// handlers run outside the lock.
final class OriginState: @unchecked Sendable {
    struct RouteEntry {
        var route: Route
        var generation: Int
        var requestCount = 0
        var bodyResponseCount = 0
    }

    struct ConnectionRecord {
        var handle: SocketHandle
        var thread: pthread_t?
    }

    private let lock = NSCondition()
    private let listenFD: Int32
    private var routes: [String: RouteEntry] = [:]
    private var nextGeneration = 0
    private var log: [RecordedRequest] = []
    private var connections: [Int: ConnectionRecord] = [:]
    private var accepted = 0
    private var active = 0
    private var peak = 0
    private var isShutDown = false
    private var acceptThread: pthread_t?

    init(listener: LoopbackListener) {
        listenFD = listener.fd
    }

    // MARK: Routes and log

    func setRoute(_ route: Route, for path: String) {
        lock.lock()
        defer { lock.unlock() }
        nextGeneration += 1
        routes[path] = RouteEntry(route: route, generation: nextGeneration)
    }

    func removeRoute(_ path: String) {
        lock.lock()
        defer { lock.unlock() }
        routes[path] = nil
    }

    func recordedRequests(_ path: String?) -> [RecordedRequest] {
        lock.lock()
        defer { lock.unlock() }
        guard let path else { return log }
        return log.filter { $0.target == path || $0.path == path }
    }

    var acceptedCount: Int {
        lock.lock()
        defer { lock.unlock() }
        return accepted
    }

    var activeCount: Int {
        lock.lock()
        defer { lock.unlock() }
        return active
    }

    var peakCount: Int {
        lock.lock()
        defer { lock.unlock() }
        return peak
    }

    /// Marks request `sequenceNumber` as answered while the next one on its connection was already there.
    func recordNextArrivedBeforeTheEnd(_ sequenceNumber: Int) {
        lock.lock()
        defer { lock.unlock() }
        if log.indices.contains(sequenceNumber) { log[sequenceNumber].nextArrivedBeforeTheEnd = true }
    }

    /// A route matched for one request, with the counters its faults need.
    struct Match {
        var route: Route
        var key: String
        var generation: Int
        /// The request's number among requests to this route, from 0.
        var requestNumber: Int
    }

    /// Numbers `request`, appends it to the log and finds its route, counting the request against it.
    func record(_ request: inout RecordedRequest) -> Match? {
        lock.lock()
        defer { lock.unlock() }
        request.sequenceNumber = log.count
        log.append(request)
        let key = routes[request.target] != nil ? request.target : request.path
        guard var entry = routes[key] else { return nil }
        let number = entry.requestCount
        entry.requestCount += 1
        routes[key] = entry
        return Match(route: entry.route, key: key, generation: entry.generation, requestNumber: number)
    }

    /// Counts one body-carrying GET response for the route and returns its number, from 0 (for the
    /// truncating faults' `times`). Returns `Int.max` when the route was replaced meanwhile.
    func claimBodyResponse(_ match: Match) -> Int {
        lock.lock()
        defer { lock.unlock() }
        guard var entry = routes[match.key], entry.generation == match.generation else { return Int.max }
        let number = entry.bodyResponseCount
        entry.bodyResponseCount += 1
        routes[match.key] = entry
        return number
    }

    var shuttingDown: Bool {
        lock.lock()
        defer { lock.unlock() }
        return isShutDown
    }

    /// Sleeps for `seconds`, returning early on shutdown.
    func sleep(seconds: Double) {
        guard seconds > 0 else { return }
        let deadline = Date().addingTimeInterval(seconds)
        lock.lock()
        defer { lock.unlock() }
        while !isShutDown && Date() < deadline {
            _ = lock.wait(until: deadline)
        }
    }

    // MARK: Threads

    func startAccepting() throws {
        let thread = try OriginThread.start(detached: false) { [self] in acceptLoop() }
        lock.lock()
        acceptThread = thread
        lock.unlock()
    }

    private func acceptLoop() {
        while true {
            let fd = accept(listenFD, nil, nil)
            if fd < 0 {
                let code = errno
                if shuttingDown { return }
                if code == EINTR || code == ECONNABORTED { continue }
                // Out of descriptors or memory: back off briefly rather than spin or give up.
                if code == EMFILE || code == ENFILE || code == ENOBUFS || code == ENOMEM {
                    usleep(10_000)
                    continue
                }
                return
            }
            // accept4(SOCK_CLOEXEC) is not visible without _GNU_SOURCE; set the flag right after.
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            var one: Int32 = 1
            setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
            let handle = SocketHandle(fd: fd)
            lock.lock()
            if isShutDown {
                lock.unlock()
                handle.close(reset: false)
                return
            }
            accepted += 1
            active += 1
            peak = max(peak, active)
            let id = accepted
            connections[id] = ConnectionRecord(handle: handle, thread: nil)
            lock.unlock()
            do {
                _ = try OriginThread.start(detached: true) { [self] in serveConnection(id: id, handle: handle) }
            } catch {
                handle.close(reset: false)
                connectionEnded(id)
            }
        }
    }

    private func connectionEnded(_ id: Int) {
        lock.lock()
        connections[id] = nil
        active -= 1
        lock.broadcast()
        lock.unlock()
    }

    private func serveConnection(id: Int, handle: SocketHandle) {
        lock.lock()
        connections[id]?.thread = pthread_self()
        lock.unlock()
        defer {
            handle.close(reset: false)
            connectionEnded(id)
        }
        let connection = OriginConnection(id: id, handle: handle, origin: self)
        var index = 0
        while !shuttingDown && !connection.isClosed {
            let head: ParsedRequestHead
            do {
                guard let parsed = try connection.readRequestHead() else { return }
                head = parsed
            } catch let error as RequestHeadError {
                try? Responder.writeSimple(
                    status: error.status, headers: [("Connection", "close")], body: Array((error.reason + "\n").utf8),
                    includeBody: true, on: connection)
                return
            } catch {
                return
            }
            let request = RecordedRequest(
                method: head.method, target: head.target, version: head.version, headers: head.headers,
                connectionID: id, indexOnConnection: index, sequenceNumber: 0)
            index += 1
            let keepAlive: Bool
            do {
                keepAlive = try respond(to: request, on: connection)
            } catch {
                return
            }
            if !keepAlive { return }
        }
    }

    /// Reads any request body, records the request, routes it and writes the response.
    /// - Returns: Whether the connection may carry another request.
    private func respond(to incoming: RecordedRequest, on connection: OriginConnection) throws -> Bool {
        var request = incoming
        if !request.headers.listValues(name: "Transfer-Encoding").isEmpty {
            try Responder.writeSimple(
                status: 501, headers: [("Connection", "close")], body: Array("request bodies are not supported\n".utf8),
                includeBody: true, on: connection)
            return false
        }
        if let length = request.header("Content-Length") {
            guard let count = Int64(length), count >= 0 else {
                try Responder.writeSimple(
                    status: 400, headers: [("Connection", "close")], body: Array("bad Content-Length\n".utf8),
                    includeBody: true, on: connection)
                return false
            }
            try connection.discard(count)
        }
        let match = record(&request)
        let clientKeepsAlive = Responder.clientWantsKeepAlive(request)
        guard let match else {
            try Responder.writeSimple(
                status: 404, headers: clientKeepsAlive ? [] : [("Connection", "close")],
                body: Array("no route for \(request.path)\n".utf8), includeBody: request.method != "HEAD", on: connection)
            return clientKeepsAlive
        }
        switch match.route {
        case .resource(let resource):
            return try Responder(
                resource: resource, request: request, match: match, connection: connection, origin: self,
                keepAlive: clientKeepsAlive
            ).respond()
        case .redirect(let status, let location):
            var headers = [("Location", location)]
            if !clientKeepsAlive { headers.append(("Connection", "close")) }
            try Responder.writeSimple(status: status, headers: headers, body: [], includeBody: false, on: connection)
            return clientKeepsAlive
        case .response(let status, let headers, let body):
            var all = headers
            if !clientKeepsAlive { all.append(("Connection", "close")) }
            try Responder.writeSimple(
                status: status, headers: all, body: body, includeBody: request.method != "HEAD", on: connection)
            let closes = headers.contains { DKHTTPHeaders.namesEqual($0.0, "Connection") && $0.1.lowercased() == "close" }
            return clientKeepsAlive && !closes
        case .script(let script):
            connection.keepsAlive = false
            try script(request, connection)
            return connection.keepsAlive
        }
    }

    // MARK: Shutdown

    func shutdown() {
        lock.lock()
        if isShutDown {
            lock.unlock()
            return
        }
        isShutDown = true
        let handles = connections.values.map(\.handle)
        let joinable = acceptThread
        acceptThread = nil
        let ownThread = connections.values.contains { record in record.thread.map(OriginThread.isCurrent) ?? false }
        lock.broadcast()
        lock.unlock()

        // On Linux, shutdown(2) on a listening socket makes a blocked accept(2) return EINVAL.
        Glibc.shutdown(listenFD, Int32(SHUT_RDWR))
        if let joinable, !OriginThread.isCurrent(joinable) { OriginThread.join(joinable) }
        Glibc.close(listenFD)
        for handle in handles { handle.interrupt() }

        let deadline = Date().addingTimeInterval(10)
        lock.lock()
        while active > (ownThread ? 1 : 0) && Date() < deadline {
            _ = lock.wait(until: deadline)
        }
        lock.unlock()
    }
}
