@_spi(DownloadKitInternal) import DownloadKit
import DownloadKitManager
import Foundation
import HTTPClient

/// Executes aria2 JSON-RPC calls against a ``DownloadKit/DownloadManager`` and turns the manager's events
/// into aria2 notifications. Transport-free: the server hands it request bodies and WebSocket frames.
///
/// ```swift
/// let service = Aria2RPCService(manager: manager, secret: "s3cret")
/// await service.start()
/// let reply = await service.handle(Data(#"{"jsonrpc":"2.0","id":1,"method":"aria2.getVersion","params":["token:s3cret"]}"#.utf8))
/// ```
public actor Aria2RPCService {
    /// Every method answered (what `system.listMethods` returns).
    public static let methods = [
        "aria2.addUri", "aria2.addTorrent", "aria2.getPeers", "aria2.addMetalink", "aria2.remove", "aria2.pause",
        "aria2.forcePause", "aria2.pauseAll", "aria2.forcePauseAll", "aria2.unpause", "aria2.unpauseAll",
        "aria2.forceRemove", "aria2.changePosition", "aria2.tellStatus", "aria2.getUris", "aria2.getFiles",
        "aria2.getServers", "aria2.tellActive", "aria2.tellWaiting", "aria2.tellStopped", "aria2.getOption",
        "aria2.changeOption", "aria2.getGlobalOption", "aria2.changeGlobalOption", "aria2.purgeDownloadResult",
        "aria2.removeDownloadResult", "aria2.getVersion", "aria2.getSessionInfo", "aria2.getGlobalStat",
        "aria2.saveSession", "aria2.changeUri", "aria2.shutdown", "aria2.forceShutdown", "system.multicall", "system.listMethods", "system.listNotifications",
    ]
    /// The notifications sent over WebSocket (what `system.listNotifications` returns).
    public static let notificationMethods = [
        "aria2.onDownloadStart", "aria2.onDownloadPause", "aria2.onDownloadStop", "aria2.onDownloadComplete",
        "aria2.onDownloadError", "aria2.onBtDownloadComplete",
    ]

    /// The manager the calls act on.
    public nonisolated let manager: DownloadManager
    /// Bounds on request size, nesting and batch length.
    public nonisolated let limits: RPCLimits
    private let secret: [UInt8]?
    /// A random id for this service's lifetime (`getSessionInfo`).
    public nonisolated let sessionID: String
    private var gidToTask: [String: String] = [:]
    private var speeds: [String: DownloadProgress] = [:]
    private var subscribers: [Int: AsyncStream<String>.Continuation] = [:]
    private var nextSubscriber = 0
    private var pump: Task<Void, Never>?
    /// Each task's last state seen in the event stream: `onDownloadStop` is sent only for a download
    /// that was running when it was removed (aria2 sends nothing for a waiting or paused one).
    private var lastStates: [String: ManagedTaskState] = [:]
    /// What each removed download had when `remove` stopped it (the manager's cancel deletes its
    /// partial data and zeroes its bytes; aria2 keeps showing them). Kept while the service lives.
    private var removedSnapshots: [String: RemovedSnapshot] = [:]
    /// The decided file of each directory download, once its partial file's record names it.
    private var decidedPaths: [String: String] = [:]
    /// What `aria2.shutdown` (`force` false) and `aria2.forceShutdown` (true) ask of the listener.
    private var shutdownHandler: (@Sendable (_ force: Bool) -> Void)?

    /// The bytes and the path of a download when it was removed.
    struct RemovedSnapshot {
        var bytes: Int64
        var path: String?
    }

    /// - Parameters:
    ///   - secret: When set, every call (but `system.listMethods`/`listNotifications`) must carry
    ///     `token:<secret>` as its first parameter, compared in constant time.
    public init(manager: DownloadManager, secret: String? = nil, limits: RPCLimits = RPCLimits()) {
        self.manager = manager
        self.secret = secret.map { Array($0.utf8) }
        self.limits = limits
        var bytes = [UInt8](repeating: 0, count: 20)
        for index in bytes.indices { bytes[index] = UInt8.random(in: 0...255) }
        sessionID = bytes.map { String(format: "%02x", $0) }.joined()
    }

    /// Starts following the manager's events (speeds for `tellStatus`, notifications). Idempotent.
    public func start() async {
        guard pump == nil else { return }
        let events = manager.events
        for task in await manager.allTasks() where lastStates[task.id] == nil { lastStates[task.id] = task.state }
        pump = Task { [weak self] in
            for await event in events {
                await self?.observe(event)
            }
            await self?.finishSubscribers()
        }
    }

    /// Stops following events and ends every notification stream.
    public func stop() {
        pump?.cancel()
        pump = nil
        finishSubscribers()
    }

    /// A stream of notification frames (JSON text) for one WebSocket client.
    public func notifications() -> AsyncStream<String> {
        let (stream, continuation) = AsyncStream<String>.makeStream(bufferingPolicy: .bufferingNewest(1024))
        let id = nextSubscriber
        nextSubscriber += 1
        subscribers[id] = continuation
        continuation.onTermination = { [weak self] _ in
            Task { await self?.unsubscribe(id) }
        }
        return stream
    }

    private func unsubscribe(_ id: Int) { subscribers[id] = nil }

    /// Sets what `aria2.shutdown` and `aria2.forceShutdown` do once they have answered `OK` (the server
    /// stops itself; without a handler both methods answer code 1).
    public func setShutdownHandler(_ handler: @escaping @Sendable (_ force: Bool) -> Void) {
        shutdownHandler = handler
    }

    private func finishSubscribers() {
        for continuation in subscribers.values { continuation.finish() }
        subscribers = [:]
    }

    private func observe(_ event: ManagerEvent) {
        switch event {
        case .progress(let taskID, let progress):
            speeds[taskID] = progress
        case .stateChanged(let taskID, let state):
            if state != .running { speeds[taskID] = nil }
            if state != .cancelled { removedSnapshots[taskID] = nil }
            let previous = lastStates.updateValue(state, forKey: taskID)
            guard let method = Aria2Status.notification(from: previous, to: state) else { return }
            let gid = Aria2GID.gid(forTaskID: taskID)
            gidToTask[gid] = taskID
            let frame = RPCResponse.notification(method: method, gid: gid).serialized
            for continuation in subscribers.values { continuation.yield(frame) }
        case .removed(let taskID):
            speeds[taskID] = nil
            lastStates[taskID] = nil
            removedSnapshots[taskID] = nil
            decidedPaths[taskID] = nil
            gidToTask[Aria2GID.gid(forTaskID: taskID)] = nil
        default:
            break
        }
    }

    // MARK: - Messages

    /// What one message (a body or a frame) has used up: bytes of answers it may still produce, and
    /// whether a wrong token cut it off (every later call of the message is refused without a look).
    struct MessageBudget {
        var remainingBytes: Int
        var cutOff = false
    }

    /// Answers one HTTP body or WebSocket frame: a response object, or an array for a batch. The answers
    /// together stay within ``RPCLimits/maxResponseBytes`` (each response is serialized as soon as it is
    /// made, and one that does not fit is replaced by ``RPCError/responseTooLarge(_:)``).
    public func handle(_ body: Data) async -> Data {
        await reply(to: body).body
    }

    /// Answers one HTTP body or WebSocket frame as ``handle(_:)`` does, with the HTTP status aria2 sends
    /// it with (``RPCReply/httpStatus``).
    public func reply(to body: Data) async -> RPCReply {
        var budget = MessageBudget(remainingBytes: limits.maxResponseBytes)
        switch RPCDecoder.decode(body, limits: limits) {
        case .single(let call):
            let (text, error) = await answer(call, &budget)
            return RPCReply(body: Data(text.utf8), error: error)
        case .batch(let calls):
            var pieces: [String] = []
            pieces.reserveCapacity(calls.count)
            for call in calls { pieces.append(await answer(call, &budget).text) }
            return RPCReply(body: Data(("[" + pieces.joined(separator: ",") + "]").utf8), error: nil)
        }
    }

    /// One call's response text (and its error, if it is one), charged to the message's budget. Once the
    /// budget is spent, the rest of the message is answered with the error without being run (so a
    /// message costs at most one budget of work, however many multicalls it holds).
    private func answer(
        _ call: Result<RPCRequest, RPCFailure>, _ budget: inout MessageBudget
    ) async -> (text: String, error: RPCError?) {
        let id: JSONValue
        var text: String
        var error: RPCError?
        switch call {
        case .failure(let failure):
            id = failure.id
            error = failure.error
            text = RPCResponse.failure(id: failure.id, error: failure.error).serialized
        case .success(let request) where budget.remainingBytes == 0:
            id = request.id
            text = ""
        case .success(let request):
            id = request.id
            let outcome = await outcome(of: request, budget: &budget)
            if case .failure(let failure) = outcome { error = failure }
            text = RPCResponse.object(id: request.id, outcome).serialized
        }
        if text.isEmpty || text.utf8.count > budget.remainingBytes {
            error = .responseTooLarge(limits.maxResponseBytes)
            text = RPCResponse.failure(id: id, error: .responseTooLarge(limits.maxResponseBytes)).serialized
            budget.remainingBytes = 0
        }
        budget.remainingBytes = max(0, budget.remainingBytes - text.utf8.count)
        return (text, error)
    }

    /// Executes one decoded call and returns its response object (as the only call of a message).
    public func respond(to request: RPCRequest) async -> JSONValue {
        var budget = MessageBudget(remainingBytes: limits.maxResponseBytes)
        return RPCResponse.object(id: request.id, await outcome(of: request, budget: &budget))
    }

    private func outcome(of request: RPCRequest, budget: inout MessageBudget) async -> Result<JSONValue, RPCError> {
        do throws(RPCError) {
            return .success(try await call(request.method, request.params, nested: false, budget: &budget))
        } catch {
            return .failure(error)
        }
    }

    /// Checks the secret and runs a method. `nested` is true inside `system.multicall`.
    ///
    /// A wrong or missing token costs ``RPCLimits/badTokenDelay`` (a suspension of this call only: the
    /// actor and the event loops go on serving others) and cuts the rest of its message off: later calls
    /// of the same batch or multicall are answered `Unauthorized` at once, without comparing their tokens,
    /// so a batch of N guesses tests one (aria2 delays each wrong token too).
    func call(
        _ method: String, _ rawParams: [JSONValue], nested: Bool, budget: inout MessageBudget
    ) async throws(RPCError) -> JSONValue {
        var params = rawParams
        var token: String?
        if let first = params.first?.stringValue, first.hasPrefix("token:") {
            token = String(first.dropFirst("token:".count))
            params.removeFirst()
        }
        if method != "system.listMethods", method != "system.listNotifications", method != "system.multicall",
            let secret
        {
            guard !budget.cutOff else { throw .unauthorized }
            guard let token, Self.constantTimeEqual(Array(token.utf8), secret) else {
                budget.cutOff = true
                try? await Task.sleep(for: limits.badTokenDelay)
                throw .unauthorized
            }
        }
        return try await dispatch(method, Params(params), nested: nested, budget: &budget)
    }

    /// Compares two byte strings in time that depends only on their lengths.
    static func constantTimeEqual(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        var difference = UInt8(a.count == b.count ? 0 : 1)
        let length = max(a.count, b.count)
        for index in 0..<length {
            let x = index < a.count ? a[index] : 0
            let y = index < b.count ? b[index] : 0
            difference |= x ^ y
        }
        return difference == 0
    }

    // MARK: - Methods

    private func dispatch(
        _ method: String, _ p: Params, nested: Bool, budget: inout MessageBudget
    ) async throws(RPCError) -> JSONValue {
        switch method {
        case "aria2.addUri": return try await addUri(p)
        case "aria2.addTorrent": throw .aria2("BitTorrent is not supported by DownloadKit.")
        case "aria2.addMetalink": return try await addMetalink(p)
        case "aria2.getPeers":
            _ = try await task(p.gid(0))
            return .array([])
        case "aria2.remove", "aria2.forceRemove": return try await remove(p.gid(0))
        case "aria2.pause", "aria2.forcePause": return try await pause(p.gid(0))
        case "aria2.pauseAll", "aria2.forcePauseAll":
            try await perform { try await manager.pauseAll() }
            return .string("OK")
        case "aria2.unpause": return try await unpause(p.gid(0))
        case "aria2.unpauseAll":
            for task in await manager.allTasks() where task.state == .paused {
                try await perform { try await manager.resume(taskID: task.id) }
            }
            return .string("OK")
        case "aria2.changePosition": return try await changePosition(p)
        case "aria2.tellStatus":
            let task = try await task(p.gid(0))
            return status(task, keys: try p.keys(1))
        case "aria2.getUris": return Aria2Shapes.uris(try await task(p.gid(0)))
        case "aria2.getFiles": return Aria2Shapes.files(shown(try await task(p.gid(0))))
        case "aria2.changeUri": return try await changeUri(p)
        case "aria2.shutdown", "aria2.forceShutdown":
            guard let shutdownHandler else { throw .aria2("This server cannot be shut down over RPC.") }
            shutdownHandler(method == "aria2.forceShutdown")
            return .string("OK")
        case "aria2.getServers":
            let gid = try p.gid(0)
            let task = try await task(gid)
            guard task.state == .running else { throw .aria2("No active download for GID#\(gid)") }
            let speed = Int(speeds[task.id]?.bytesPerSecond ?? 0)
            return .array([
                .object([
                    "index": .string("1"),
                    "servers": .array([
                        .object([
                            "uri": .string(Aria2Redaction.uri(task.currentURL)),
                            "currentUri": .string(Aria2Redaction.uri(task.currentURL)),
                            "downloadSpeed": .string(String(speed)),
                        ])
                    ]),
                ])
            ])
        case "aria2.tellActive":
            let keys = try p.keys(0)
            return .array(await manager.allTasks().filter { $0.state == .running }.map { status($0, keys: keys) })
        case "aria2.tellWaiting": return try await tellList(p, stopped: false)
        case "aria2.tellStopped": return try await tellList(p, stopped: true)
        case "aria2.getOption": return .object(options(of: try await task(p.gid(0))))
        case "aria2.changeOption": return try await changeOption(p)
        case "aria2.getGlobalOption": return .object(await globalOptions())
        case "aria2.changeGlobalOption": return try await changeGlobalOption(p)
        case "aria2.getGlobalStat": return await globalStat()
        case "aria2.purgeDownloadResult":
            for task in await manager.allTasks() where Aria2Status.isStopped(task.state) {
                try await perform { try await manager.remove(taskID: task.id) }
            }
            return .string("OK")
        case "aria2.removeDownloadResult":
            let gid = try p.gid(0)
            let task = try await task(gid)
            guard Aria2Status.isStopped(task.state) else {
                throw .aria2("Could not remove download result of GID#\(gid)")
            }
            try await perform { try await manager.remove(taskID: task.id) }
            return .string("OK")
        case "aria2.getVersion":
            return .object([
                "version": .string(DownloadKitVersion.string),
                // "Metalink": front ends (AriaNg) offer the Metalink upload (addMetalink) only when it is listed.
                "enabledFeatures": .array(["HTTPS", "Message Digest", "Metalink"].map(JSONValue.string)),
            ])
        case "aria2.getSessionInfo": return .object(["sessionId": .string(sessionID)])
        case "aria2.saveSession": return .string("OK")  // every change is already committed to tasks.sqlite
        case "system.listMethods": return .array(Self.methods.map(JSONValue.string))
        case "system.listNotifications": return .array(Self.notificationMethods.map(JSONValue.string))
        case "system.multicall":
            guard !nested else { throw .aria2("Recursive system.multicall forbidden.") }
            return try await multicall(p, budget: &budget)
        default:
            throw .aria2("No such method: \(method)")
        }
    }

    /// `system.multicall`: its results together must fit in what the message has left (measured as they
    /// are made; the first one past it drops them all and fails the multicall with
    /// ``RPCError/responseTooLarge(_:)``), so batch × multicall × result size is bounded as one product.
    private func multicall(_ p: Params, budget: inout MessageBudget) async throws(RPCError) -> JSONValue {
        let calls = try p.array(0)
        guard calls.count <= limits.maxBatch else { throw RPCError.batchTooLong(limits.maxBatch) }
        var results: [JSONValue] = []
        var bytes = 0
        func charge(_ result: JSONValue) throws(RPCError) {
            bytes += result.serialized.utf8.count + 1
            guard bytes <= budget.remainingBytes else {
                budget.remainingBytes = 0  // the work is spent: the rest of the message is not run
                throw .responseTooLarge(limits.maxResponseBytes)
            }
        }
        for call in calls {
            guard let object = call.objectValue, let name = object["methodName"]?.stringValue else {
                results.append(RPCError.aria2("system.multicall expected struct.").json)
                continue
            }
            let params: [JSONValue]
            switch object["params"] {
            case nil, .null?: params = []
            case .array(let array)?: params = array
            default:
                results.append(RPCError.aria2("Missing params. or params is not array.").json)
                continue
            }
            let result: JSONValue
            do throws(RPCError) {
                result = .array([try await self.call(name, params, nested: true, budget: &budget)])
            } catch {
                result = error.json
            }
            try charge(result)
            results.append(result)
        }
        return .array(results)
    }

    private func addUri(_ p: Params) async throws(RPCError) -> JSONValue {
        let uris = try p.array(0).compactMap(\.stringValue)
        guard let url = uris.first else { throw .aria2("URI is not provided.") }
        let options = try Aria2TaskOptions(p.object(1) ?? [:])
        let position = try p.optionalInt(2, "position", in: Params.signedRange)
        let destination = try options.destination(defaultDirectory: defaultDirectory, exists: FileProbe.exists)
        // Every URI is a source of the one file: the first the task's URL, the others its mirrors (text
        // that is not an http(s) URL skipped, as aria2 skips a URI it cannot use).
        let request = options.taskRequest(
            url: url, mirrors: uris.dropFirst().filter(Aria2URIList.isUsable), destination: destination,
            checksum: options.checksum)
        return .string(try await add([request], pause: options.pause, position: position)[0])
    }

    /// `addMetalink(metalink, options, position)`: one download per `<file>` of the base64 Metalink
    /// (``Aria2Metalink``), each named by the document under `dir` (aria2's rule for an existing file
    /// applies to each), from its best http(s) URL with the others as mirrors, checked against its
    /// strongest hash the engine computes and, piece by piece as they complete, against its strongest
    /// `<pieces>` list the engine computes (the plan's, as `get --metalink`). Answers their GIDs in document order; a document that cannot
    /// be read or a file that cannot be downloaded adds nothing.
    private func addMetalink(_ p: Params) async throws(RPCError) -> JSONValue {
        let metalink = try Aria2Metalink.document(base64: p.string(0))
        let options = try Aria2TaskOptions(p.object(1) ?? [:])
        let position = try p.optionalInt(2, "position", in: Params.signedRange)
        var requests: [DownloadManager.TaskRequest] = []
        for plan in try Aria2Metalink.plans(metalink) {
            var named = options
            named.out = plan.name
            var request = options.taskRequest(
                url: plan.url, mirrors: plan.mirrors,
                destination: try named.destination(defaultDirectory: defaultDirectory, exists: FileProbe.exists),
                checksum: plan.hash.flatMap(Checksum.init(metalink:)) ?? options.checksum)
            request.pieceChecksums = plan.pieces.flatMap(PieceChecksums.init(metalink:))
            requests.append(request)
        }
        return .array(try await add(requests, pause: options.pause, position: position).map(JSONValue.string))
    }

    /// Enqueues `requests` (made paused when `pause`; else the waiting ones moved to `position`,
    /// `position + 1`, … in order) and answers their GIDs.
    private func add(
        _ requests: [DownloadManager.TaskRequest], pause: Bool, position: Int?
    ) async throws(RPCError) -> [String] {
        let ids = try await perform { try await manager.enqueue(requests) }
        var gids: [String] = []
        for (offset, id) in ids.enumerated() {
            if pause, await manager.task(id)?.state != .paused {
                // A live download of this URL was reused: pausing it is what aria2's option asks of the GID answered.
                try await perform { try await manager.pause(taskID: id) }
            } else if let position, await manager.task(id)?.state == .waiting {
                let line = await manager.waitingTaskIDs()
                try await perform {
                    try await manager.move(taskID: id, toPosition: min(max(0, position + offset), line.count - 1))
                }
            }
            let gid = Aria2GID.gid(forTaskID: id)
            gidToTask[gid] = id
            gids.append(gid)
        }
        return gids
    }

    private func remove(_ gid: String) async throws(RPCError) -> JSONValue {
        let task = try await task(gid)
        guard !Aria2Status.isStopped(task.state) else { throw .aria2("Active Download not found for GID#\(gid)") }
        let before = shown(task)
        removedSnapshots[task.id] = RemovedSnapshot(bytes: before.bytesReceived, path: before.path)
        do throws(RPCError) {
            try await perform { try await manager.cancel(taskID: task.id) }
        } catch {
            removedSnapshots[task.id] = nil
            throw error
        }
        return .string(gid)
    }

    /// `changeUri(gid, fileIndex, delUris, addUris[, position])`: the task's URIs (its URL, then its
    /// mirrors) after deleting (one occurrence per entry) and inserting (at `position`, else at the
    /// end; text that is not an http(s) URL is skipped, as aria2 skips what it cannot use) must be at
    /// least one. The first becomes the task's URL (its bytes are kept when the server's validator still
    /// matches), the rest its mirrors. Answers aria2's
    /// `[numDeleted, numAdded]`. Waiting, paused or active downloads (an active one restarts from its durable
    /// bytes with the new sources: ``DownloadManager/setSources(taskID:url:mirrors:)``); nothing changes when it
    /// fails.
    private func changeUri(_ p: Params) async throws(RPCError) -> JSONValue {
        let gid = try p.gid(0)
        let fileIndex = try p.int(1, "fileIndex", in: Int64.min...Int64.max)
        guard fileIndex >= 1 else {
            throw .aria2("The integer parameter at 1 has invalid value: the value must be greater than or equal to 1.")
        }
        guard fileIndex == 1 else { throw .aria2("fileIndex is out of range") }
        let deleted = try p.array(2).compactMap(\.stringValue)
        let added = try p.array(3).compactMap(\.stringValue).filter(Aria2URIList.isUsable)
        let position = try p.optionalInt(4, "position", in: Int64.min...Params.numberBound)
        if let position, position < 0 { throw .aria2("Position must be greater than or equal to 0.") }
        let task = try await task(gid)
        if Aria2Status.isStopped(task.state) { throw .aria2("Cannot remove URIs from GID#\(gid)") }
        let change = Aria2URIList.change(
            [task.currentURL] + task.mirrors, deleting: deleted, adding: added, at: position)
        guard let url = change.uris.first else {
            throw .aria2("GID#\(gid) would have no URI left: add another URI in the same changeUri.")
        }
        // An active download restarts from its durable bytes with the new sources (at most its requests in
        // flight are fetched again); aria2 adds them to the running download.
        try await perform { try await manager.setSources(taskID: task.id, url: url, mirrors: Array(change.uris.dropFirst())) }
        return .array([.int(Int64(change.deletedCount)), .int(Int64(change.addedCount))])
    }

    private func pause(_ gid: String) async throws(RPCError) -> JSONValue {
        let task = try await task(gid)
        guard task.state == .waiting || task.state == .running else { throw .aria2("GID#\(gid) cannot be paused now") }
        try await perform { try await manager.pause(taskID: task.id) }
        return .string(gid)
    }

    private func unpause(_ gid: String) async throws(RPCError) -> JSONValue {
        let task = try await task(gid)
        guard task.state == .paused else { throw .aria2("GID#\(gid) cannot be unpaused now") }
        try await perform { try await manager.resume(taskID: task.id) }
        return .string(gid)
    }

    /// `changePosition(gid, pos, how)`: `POS_SET`, `POS_CUR`, `POS_END` within the waiting line.
    private func changePosition(_ p: Params) async throws(RPCError) -> JSONValue {
        let gid = try p.gid(0)
        let offset = try p.int(1, "pos", in: Params.signedRange)
        guard let how = Aria2Window.Origin(rawValue: try p.string(2)) else { throw .aria2("Illegal argument.") }
        let task = try await task(gid)
        let line = await manager.waitingTaskIDs()
        guard let current = line.firstIndex(of: task.id) else {
            throw .aria2("GID#\(gid) is not in the waiting queue.")
        }
        let clamped = Aria2Window.position(offset, from: how, current: current, count: line.count)
        try await perform { try await manager.move(taskID: task.id, toPosition: clamped) }
        return .int(Int64(await manager.waitingTaskIDs().firstIndex(of: task.id) ?? clamped))
    }

    private func changeOption(_ p: Params) async throws(RPCError) -> JSONValue {
        let task = try await task(p.gid(0))
        let options = try Aria2TaskOptions(p.object(1) ?? [:])
        if let limit = options.maxDownloadLimit {
            try await perform { try await manager.setRateLimit(taskID: task.id, bytesPerSecond: limit > 0 ? limit : nil) }
        }
        if options.split != nil || options.maxConnectionPerServer != nil {
            // A running download restarts from its bytes with the new counts, as aria2 restarts it.
            try await perform {
                try await manager.setConnections(
                    taskID: task.id, connections: options.split ?? task.connections,
                    perSource: options.maxConnectionPerServer ?? task.connectionsPerSource)
            }
        }
        return .string("OK")
    }

    private func changeGlobalOption(_ p: Params) async throws(RPCError) -> JSONValue {
        let options = p.object(0) ?? [:]
        if let value = options["max-concurrent-downloads"] {
            guard let limit = (value.stringValue.flatMap { Int($0) } ?? value.intValue.map { Int($0) }),
                (1...Int(Params.numberBound)).contains(limit)
            else {
                throw Aria2TaskOptions.bad("max-concurrent-downloads")
            }
            try await perform { try await manager.setMaxConcurrent(limit) }
        }
        if let value = options["max-overall-download-limit"] {
            guard let limit = (value.stringValue.flatMap(Aria2Size.parse) ?? value.intValue.map { Int($0) }), limit >= 0
            else { throw Aria2TaskOptions.bad("max-overall-download-limit") }
            await manager.setGlobalRateLimit(limit > 0 ? limit : nil)
        }
        return .string("OK")
    }

    /// `tellWaiting`/`tellStopped(offset, num, keys)`; a negative offset counts from the end, listing backwards.
    private func tellList(_ p: Params, stopped: Bool) async throws(RPCError) -> JSONValue {
        let offset = try p.int(0, "offset", in: Params.signedRange)
        let count = try p.int(1, "num", in: Params.signedRange)
        let keys = try p.keys(2)
        let all = await manager.allTasks()
        var list: [ManagedTask]
        if stopped {
            list = all.filter { Aria2Status.isStopped($0.state) }
                .sorted { ($0.finishedAt ?? $0.updatedAt, $0.id) < ($1.finishedAt ?? $1.updatedAt, $1.id) }
        } else {
            let byID = Dictionary(uniqueKeysWithValues: all.map { ($0.id, $0) })
            list = await manager.waitingTaskIDs().compactMap { byID[$0] }
            list += all.filter { $0.state == .paused }
        }
        return .array(Aria2Window.indices(offset: offset, num: count, count: list.count).map { status(list[$0], keys: keys) })
    }

    private func globalStat() async -> JSONValue {
        let all = await manager.allTasks()
        let active = all.filter { $0.state == .running }
        let speed = active.reduce(0) { $0 + Int(speeds[$1.id]?.bytesPerSecond ?? 0) }
        let stopped = all.filter { Aria2Status.isStopped($0.state) }.count
        return .object([
            "downloadSpeed": .string(String(speed)), "uploadSpeed": .string("0"),
            "numActive": .string(String(active.count)),
            "numWaiting": .string(String(all.filter { $0.state == .waiting || $0.state == .paused }.count)),
            "numStopped": .string(String(stopped)), "numStoppedTotal": .string(String(stopped)),
        ])
    }

    // MARK: - Helpers

    private var defaultDirectory: String {
        manager.configuration.defaultDownloadDirectory ?? manager.stateDirectory + "/Downloads"
    }

    private func status(_ task: ManagedTask, keys: [String]?) -> JSONValue {
        let progress = speeds[task.id]
        return Aria2Shapes.status(
            shown(task), downloadSpeed: Int(progress?.bytesPerSecond ?? 0),
            connections: progress?.activeConnections ?? 1, keys: keys)
    }

    /// The task as answers show it, with what the service knows beyond the manager's snapshot: a removed
    /// download's bytes and path from when it was removed, a running download's latest bytes, and a
    /// directory download's path once its name is decided (aria2 shows `dir/name` from the first
    /// response on, `""` before).
    private func shown(_ task: ManagedTask) -> ManagedTask {
        var shown = task
        if task.state == .cancelled, let snapshot = removedSnapshots[task.id] {
            shown.bytesReceived = snapshot.bytes
            shown.path = snapshot.path
            return shown
        }
        if task.state == .running, let progress = speeds[task.id] {
            shown.bytesReceived = max(task.bytesReceived, progress.bytesReceived)
        }
        if shown.path == nil, !Aria2Status.isStopped(task.state) {
            if let known = decidedPaths[task.id] {
                shown.path = known
            } else if let decided = Aria2Shapes.decidedPath(of: task) {
                decidedPaths[task.id] = decided
                shown.path = decided
            }
        }
        return shown
    }

    /// Settings the manager applies to all tasks, as aria2 option strings.
    private func sharedOptions() -> [String: JSONValue] {
        let download = manager.configuration.download
        return [
            "split": .string(String(download.connections)),
            "max-connection-per-server": .string(String(download.connectionsPerSource)),
            "max-tries": .string(String(download.retries + 1)),
            "timeout": .string(String(Int(download.client.idleTimeout.asSeconds))),
        ]
    }

    private func options(of task: ManagedTask) -> [String: JSONValue] {
        var options = sharedOptions()
        options["dir"] = .string(Aria2Shapes.directory(of: task))
        if case .file(let path) = task.destination { options["out"] = .string((path as NSString).lastPathComponent) }
        if !task.headers.isEmpty {
            options["header"] = .string(
                task.headers.sorted { $0.key < $1.key }
                    .map { "\($0.key): \(Aria2Redaction.headerValue(name: $0.key, $0.value))\n" }.joined())
        }
        if let checksum = task.checksum {
            let name = ["sha256": "sha-256", "sha1": "sha-1", "md5": "md5"][checksum.algorithm.rawValue] ?? checksum.algorithm.rawValue
            options["checksum"] = .string("\(name)=\(checksum.expectedHex)")
        }
        options["max-download-limit"] = .string(String(task.rateLimit ?? 0))
        if let connections = task.connections { options["split"] = .string(String(connections)) }
        if let perSource = task.connectionsPerSource {
            options["max-connection-per-server"] = .string(String(perSource))
        }
        return options
    }

    private func globalOptions() async -> [String: JSONValue] {
        var options = sharedOptions()
        options["dir"] = .string(defaultDirectory)
        options["max-concurrent-downloads"] = .string(String(await manager.maxConcurrent))
        options["max-overall-download-limit"] = .string(String(await manager.currentGlobalRateLimit ?? 0))
        options["max-download-limit"] = .string("0")
        return options
    }

    /// The task with this GID (aria2's messages for a malformed or unknown GID).
    private func task(_ gid: String) async throws(RPCError) -> ManagedTask {
        if let id = gidToTask[gid], let task = await manager.task(id) { return task }
        var found: ManagedTask?
        for task in await manager.allTasks() {
            let taskGID = Aria2GID.gid(forTaskID: task.id)
            gidToTask[taskGID] = task.id
            if taskGID == gid { found = task }
        }
        guard let found else { throw .aria2("GID \(gid) is not found") }
        return found
    }

    /// Runs a manager operation, turning its errors into aria2 error objects.
    private func perform<T>(_ body: () async throws -> T) async throws(RPCError) -> T {
        do {
            return try await body()
        } catch let error as DownloadManagerError {
            throw .aria2(error.detail)
        } catch {
            throw .aria2("\(error)")
        }
    }
}

typealias Params = RPCParams

extension RPCParams {
    /// A GID (aria2's `Invalid GID …` for anything else), lowercased.
    func gid(_ index: Int) throws(RPCError) -> String {
        let text = try string(index)
        guard Aria2GID.isValid(text) else { throw .aria2("Invalid GID \(text)") }
        return text.lowercased()
    }
}
