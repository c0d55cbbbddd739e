#if canImport(DownloadKitRuntime)
    import DownloadKitRuntime
#endif
import Foundation

// The wire protocol between `downloadkitd` and its clients (docs/DAEMON.md). Foundation and the runtime layer's
// DKErrno only, so the fuzz target (Fuzz/FuzzSessionProtocol.swift) compiles it with Sources/Runtime/DKErrno.swift
// in one module of its own (Scripts/fuzz.sh).

/// Constants of the session protocol.
public enum SessionProtocol {
    /// The protocol version this build speaks. A daemon answers a `hello` with another version with an
    /// `error` frame (`unsupportedVersion`) and closes the connection.
    public static let version = 1
    /// The largest frame (JSON bytes after the 4-byte length) either side accepts; checked before any
    /// allocation.
    public static let maxFrameBytes = 1 << 20
    /// The longest session identifier.
    public static let maxIdentifierLength = 128

    /// Whether `identifier` may name a session: 1–128 characters of `A-Z a-z 0-9 . _ -`, not `.` or `..`
    /// (it becomes a directory name).
    public static func isValidIdentifier(_ identifier: String) -> Bool {
        guard !identifier.isEmpty, identifier.utf8.count <= maxIdentifierLength, identifier != ".", identifier != ".."
        else { return false }
        return identifier.utf8.allSatisfy { byte in
            (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A)
                || byte == 0x2E || byte == 0x5F || byte == 0x2D
        }
    }
}

/// Why the protocol or the daemon refused something; sent in `error` frames and thrown by the client.
public struct SessionError: Error, Sendable, Hashable, CustomStringConvertible {
    /// A stable, machine-readable cause.
    public struct Code: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
        public let rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        public var description: String { rawValue }
        /// A frame longer than ``SessionProtocol/maxFrameBytes``.
        public static let frameTooLarge = Code(rawValue: "frameTooLarge")
        /// A frame that is not a JSON object of a known message type with valid fields.
        public static let malformedMessage = Code(rawValue: "malformedMessage")
        /// The peer speaks another protocol version.
        public static let unsupportedVersion = Code(rawValue: "unsupportedVersion")
        /// A request before the `hello`, or a second `hello`.
        public static let notGreeted = Code(rawValue: "notGreeted")
        /// The session identifier is empty, too long or has characters outside `A-Z a-z 0-9 . _ -`.
        public static let invalidIdentifier = Code(rawValue: "invalidIdentifier")
        /// The connecting process runs as another user than the daemon (SO_PEERCRED).
        public static let permissionDenied = Code(rawValue: "permissionDenied")
        /// The client sent more than the daemon buffers for it, or did not read its replies.
        public static let overloaded = Code(rawValue: "overloaded")
        /// No task has this id in the session.
        public static let unknownTask = Code(rawValue: "unknownTask")
        /// A URL that is not http or https.
        public static let invalidURL = Code(rawValue: "invalidURL")
        /// The request is not valid in the task's state.
        public static let invalidState = Code(rawValue: "invalidState")
        /// The daemon could not read or write the session's state.
        public static let storage = Code(rawValue: "storage")
        /// The daemon is shutting down.
        public static let shuttingDown = Code(rawValue: "shuttingDown")
        /// No daemon answers on the socket (client side only).
        public static let daemonUnavailable = Code(rawValue: "daemonUnavailable")
        /// The connection closed or failed while a request was outstanding (client side only).
        public static let disconnected = Code(rawValue: "disconnected")
        /// The session object was closed (client side only).
        public static let closed = Code(rawValue: "closed")
    }

    public var code: Code
    /// A sentence naming the cause.
    public var detail: String

    public init(_ code: Code, _ detail: String) {
        self.code = code
        self.detail = detail
    }

    public var description: String { "\(code): \(detail)" }
}

/// What kind of thing happened to a task (the durable events of a session).
public enum SessionEventKind: String, Sendable, Hashable, Codable, CaseIterable {
    /// The task was added.
    case queued
    /// Its transfer started (or started again after the daemon restarted).
    case started
    /// The user paused it.
    case paused
    /// The user resumed it (it waits for a slot again).
    case resumed
    /// It stopped with an error (`errorCode`, `errorDetail`).
    case failed
    /// Its file is complete at `path` (`bytes`, `checksum`).
    case finished
    /// The user cancelled it; its partial data is gone.
    case cancelled
    /// The task was removed from the session.
    case removed

    /// Whether the task's transfer ended with this event.
    public var isTerminal: Bool { self == .failed || self == .finished || self == .cancelled || self == .removed }
}

/// A task's error as the protocol carries it: the manager's `ManagedTaskError` field by field, each a raw
/// value of a closed set (`code` a `DownloadError.Code` name, `category` a `DownloadError.Category`), so a
/// client decides from fields, never from the message. Added within version 1 beside `errorCode` and
/// `errorDetail` (which still carry the code and the message for older clients).
public struct SessionTaskError: Sendable, Hashable, Codable {
    /// The lower-level error (`ManagedTaskError.Cause`): its layer (`transport`, `wire`, `fileSystem`,
    /// `bodyWrite`, `resumeInfo`, `other`), the lower error's code name, `errno` and system call.
    public struct Cause: Sendable, Hashable, Codable {
        public var layer: String
        public var code: String?
        /// The error number, when the lower error was a failed system call (sent as `errno`, a number).
        public var errorNumber: DKErrno?
        public var operation: String?

        private enum CodingKeys: String, CodingKey {
            case layer, code, errorNumber = "errno", operation
        }

        public init(layer: String, code: String? = nil, errorNumber: DKErrno? = nil, operation: String? = nil) {
            self.layer = layer
            self.code = code
            self.errorNumber = errorNumber
            self.operation = operation
        }

        /// A cause with a raw C error number.
        @available(*, deprecated, renamed: "init(layer:code:errorNumber:operation:)")
        public init(layer: String, code: String? = nil, errno: Int32?, operation: String? = nil) {
            self.init(layer: layer, code: code, errorNumber: errno.map(DKErrno.init(rawValue:)), operation: operation)
        }

        /// ``errorNumber``'s raw C value.
        @available(*, deprecated, renamed: "errorNumber")
        public var errno: Int32? {
            get { errorNumber?.rawValue }
            set { errorNumber = newValue.map(DKErrno.init(rawValue:)) }
        }
    }

    /// The code's name (`httpStatus`, `diskFull`, `invalidDestination`, …).
    public var code: String
    /// The category (`httpStatus`, `network`, `tls`, `redirect`, `integrity`, `protocolViolation`, `space`,
    /// `fileSystem`, `inUse`, `stopped`, `other`).
    public var category: String
    /// The HTTP status, when the server answered with one.
    public var httpStatus: Int?
    /// Whether retrying later may succeed.
    public var transient: Bool
    /// The lower-level error, when there was one.
    public var cause: Cause?
    /// The sentence describing it (for people).
    public var message: String

    public init(code: String, category: String, httpStatus: Int?, transient: Bool, cause: Cause?, message: String) {
        self.code = code
        self.category = category
        self.httpStatus = httpStatus
        self.transient = transient
        self.cause = cause
        self.message = message
    }
}

/// One durable event of a session, numbered by `seq` (1, 2, 3, … per session, never reused).
public struct SessionEvent: Sendable, Hashable, Codable {
    /// The session's sequence number: strictly increasing, in the order the events happened.
    public var seq: Int64
    public var kind: SessionEventKind
    /// The task's id.
    public var task: String
    /// Seconds since 1970 when the daemon recorded it.
    public var time: Double
    /// The task's original URL.
    public var url: String?
    /// `finished`: the final path; else the destination when known.
    public var path: String?
    /// `finished`: the file's length in bytes.
    public var bytes: Int64?
    /// `finished`: `ALGO=HEX` — the requested checksum (verified), else the file's SHA-256.
    public var checksum: String?
    /// `failed`: the error's code name (`httpStatus`, `checksumMismatch`, …).
    public var errorCode: String?
    /// `failed`: the sentence describing it.
    public var errorDetail: String?
    /// `failed`: the error's typed fields (nil from a daemon or a log row older than them).
    public var error: SessionTaskError?

    public init(
        seq: Int64, kind: SessionEventKind, task: String, time: Double, url: String? = nil, path: String? = nil,
        bytes: Int64? = nil, checksum: String? = nil, errorCode: String? = nil, errorDetail: String? = nil,
        error: SessionTaskError? = nil
    ) {
        self.seq = seq
        self.kind = kind
        self.task = task
        self.time = time
        self.url = url
        self.path = path
        self.bytes = bytes
        self.checksum = checksum
        self.errorCode = errorCode
        self.errorDetail = errorDetail
        self.error = error
    }
}

/// A task to add to a session: the same options as `DownloadManager.enqueue`.
public struct SessionTaskRequest: Sendable, Hashable, Codable {
    /// An http or https URL.
    public var url: String
    /// Exactly this file (absolute path); excludes `directory`.
    public var file: String?
    /// A directory (absolute path) in which the file is named from the response; excludes `file`.
    public var directory: String?
    /// The caller's id for the file (de-duplication; names the file in `directory`).
    public var fileID: String?
    /// `ALGO=HEX` (sha256, sha1, md5), verified before the file is moved into place.
    public var checksum: String?
    /// Extra request header fields.
    public var headers: [String: String]?
    /// Higher starts first (default 0).
    public var priority: Int?
    /// A group name.
    public var group: String?
    /// Range connections for this file (segmented download).
    public var connections: Int?
    /// This task's limit in bytes per second.
    public var rateLimit: Int?

    public init(
        url: String, file: String? = nil, directory: String? = nil, fileID: String? = nil, checksum: String? = nil,
        headers: [String: String]? = nil, priority: Int? = nil, group: String? = nil, connections: Int? = nil,
        rateLimit: Int? = nil
    ) {
        self.url = url
        self.file = file
        self.directory = directory
        self.fileID = fileID
        self.checksum = checksum
        self.headers = headers
        self.priority = priority
        self.group = group
        self.connections = connections
        self.rateLimit = rateLimit
    }
}

/// A snapshot of one task of a session (`list`).
public struct SessionTaskInfo: Sendable, Hashable, Codable {
    public var id: String
    /// `waiting`, `running`, `paused`, `completed`, `failed` or `cancelled`.
    public var state: String
    public var url: String
    public var currentURL: String
    /// The final path once known.
    public var path: String?
    public var bytesReceived: Int64
    public var totalBytes: Int64?
    public var priority: Int
    public var group: String?
    /// The error's code name (kept for older clients; ``error`` has every field).
    public var errorCode: String?
    /// The error's message (kept for older clients).
    public var errorDetail: String?
    /// The error's typed fields (nil from a daemon older than them).
    public var error: SessionTaskError?

    public init(
        id: String, state: String, url: String, currentURL: String, path: String?, bytesReceived: Int64,
        totalBytes: Int64?, priority: Int, group: String?, errorCode: String?, errorDetail: String?,
        error: SessionTaskError? = nil
    ) {
        self.id = id
        self.state = state
        self.url = url
        self.currentURL = currentURL
        self.path = path
        self.bytesReceived = bytesReceived
        self.totalBytes = totalBytes
        self.priority = priority
        self.group = group
        self.errorCode = errorCode
        self.errorDetail = errorDetail
        self.error = error
    }

    /// Whether the task will not run again by itself (completed, failed or cancelled).
    public var hasEnded: Bool { state == "completed" || state == "failed" || state == "cancelled" }
}

/// How far a session's event log is written and acknowledged.
public struct SessionPosition: Sendable, Hashable {
    /// The last sequence number written.
    public var lastSequence: Int64
    /// Events up to this one are acknowledged.
    public var acknowledged: Int64
    public init(lastSequence: Int64, acknowledged: Int64) {
        self.lastSequence = lastSequence
        self.acknowledged = acknowledged
    }
}

/// What a client asks (each request but `hello` carries an `id` its reply repeats).
public enum ClientRequest: Sendable, Hashable {
    /// The first frame: protocol version and session identifier.
    case hello(version: Int, session: String)
    case enqueue([SessionTaskRequest])
    case pause([String])
    case resume([String])
    case cancel([String])
    case remove([String], deletingFiles: Bool)
    case list
    case refreshURL(task: String, url: String)
    /// Start receiving events: every unacknowledged one with a sequence number above `after`, then live ones.
    case subscribe(after: Int64)
    /// Events up to `upTo` are handled; they are never delivered again.
    case acknowledge(upTo: Int64)
}

/// A client frame: a request and the id its reply carries.
public struct ClientMessage: Sendable, Hashable {
    public var id: Int
    public var request: ClientRequest
    public init(id: Int, _ request: ClientRequest) {
        self.id = id
        self.request = request
    }
}

/// What the daemon sends.
public enum ServerMessage: Sendable, Hashable {
    /// The answer to `hello`: the daemon's version, the session and how far it has been acknowledged.
    case welcome(version: Int, session: String, acknowledged: Int64)
    /// Success of request `id`; `taskIDs` for `enqueue` (ids in order), `tasks` for `list`. `position`:
    /// the session's last written and acknowledged sequence numbers (for `list`, including every event
    /// of the transitions the snapshot shows).
    case ok(id: Int, taskIDs: [String], tasks: [SessionTaskInfo], position: SessionPosition)
    /// A failed request (`id`), or a connection-level error (`id` nil) after which the daemon closes.
    case error(id: Int?, SessionError)
    /// A durable event of the session.
    case event(SessionEvent)
}

/// The JSON shape of every frame: a `type` and the fields that type uses (docs/DAEMON.md lists them).
struct WireFrame: Codable {
    var type: String
    var id: Int?
    var version: Int?
    var session: String?
    var tasks: [String]?
    var requests: [SessionTaskRequest]?
    var deleteFiles: Bool?
    var task: String?
    var url: String?
    var after: Int64?
    var upTo: Int64?
    var acknowledged: Int64?
    var lastSeq: Int64?
    var taskList: [SessionTaskInfo]?
    var code: String?
    var detail: String?
    var event: SessionEvent?

    init(type: String) { self.type = type }
}

/// Encodes and decodes frames' JSON (the length prefix is ``FrameDecoder``'s and ``FrameEncoder``'s).
public enum SessionCodec {
    /// The most tasks one request may name or add.
    public static let maxTasksPerRequest = 10_000

    public static func encode(_ message: ClientMessage) -> [UInt8] {
        var frame: WireFrame
        switch message.request {
        case .hello(let version, let session):
            frame = WireFrame(type: "hello")
            frame.version = version
            frame.session = session
        case .enqueue(let requests):
            frame = WireFrame(type: "enqueue")
            frame.requests = requests
        case .pause(let ids):
            frame = WireFrame(type: "pause")
            frame.tasks = ids
        case .resume(let ids):
            frame = WireFrame(type: "resume")
            frame.tasks = ids
        case .cancel(let ids):
            frame = WireFrame(type: "cancel")
            frame.tasks = ids
        case .remove(let ids, let deletingFiles):
            frame = WireFrame(type: "remove")
            frame.tasks = ids
            frame.deleteFiles = deletingFiles
        case .list:
            frame = WireFrame(type: "list")
        case .refreshURL(let task, let url):
            frame = WireFrame(type: "refreshURL")
            frame.task = task
            frame.url = url
        case .subscribe(let after):
            frame = WireFrame(type: "subscribe")
            frame.after = after
        case .acknowledge(let upTo):
            frame = WireFrame(type: "ack")
            frame.upTo = upTo
        }
        frame.id = message.id
        return json(frame)
    }

    public static func encode(_ message: ServerMessage) -> [UInt8] {
        var frame: WireFrame
        switch message {
        case .welcome(let version, let session, let acknowledged):
            frame = WireFrame(type: "welcome")
            frame.version = version
            frame.session = session
            frame.acknowledged = acknowledged
        case .ok(let id, let taskIDs, let tasks, let position):
            frame = WireFrame(type: "ok")
            frame.id = id
            frame.tasks = taskIDs
            frame.taskList = tasks
            frame.lastSeq = position.lastSequence
            frame.acknowledged = position.acknowledged
        case .error(let id, let error):
            frame = WireFrame(type: "error")
            frame.id = id
            frame.code = error.code.rawValue
            frame.detail = error.detail
        case .event(let event):
            frame = WireFrame(type: "event")
            frame.event = event
        }
        return json(frame)
    }

    /// Decodes a client frame.
    /// - Throws: ``SessionError`` `malformedMessage` naming what is wrong.
    public static func decodeClient(_ bytes: [UInt8]) throws(SessionError) -> ClientMessage {
        let frame = try wire(bytes)
        func need<T>(_ value: T?, _ field: String) throws(SessionError) -> T {
            guard let value else { throw SessionError(.malformedMessage, "`\(frame.type)` needs `\(field)`") }
            return value
        }
        func ids() throws(SessionError) -> [String] {
            let ids = try need(frame.tasks, "tasks")
            guard ids.count <= maxTasksPerRequest else {
                throw SessionError(.malformedMessage, "more than \(maxTasksPerRequest) tasks in one request")
            }
            return ids
        }
        let request: ClientRequest
        switch frame.type {
        case "hello": request = .hello(version: try need(frame.version, "version"), session: try need(frame.session, "session"))
        case "enqueue":
            let requests = try need(frame.requests, "requests")
            guard requests.count <= maxTasksPerRequest else {
                throw SessionError(.malformedMessage, "more than \(maxTasksPerRequest) tasks in one request")
            }
            request = .enqueue(requests)
        case "pause": request = .pause(try ids())
        case "resume": request = .resume(try ids())
        case "cancel": request = .cancel(try ids())
        case "remove": request = .remove(try ids(), deletingFiles: frame.deleteFiles ?? false)
        case "list": request = .list
        case "refreshURL": request = .refreshURL(task: try need(frame.task, "task"), url: try need(frame.url, "url"))
        case "subscribe": request = .subscribe(after: max(0, frame.after ?? 0))
        case "ack": request = .acknowledge(upTo: try need(frame.upTo, "upTo"))
        default: throw SessionError(.malformedMessage, "unknown message type `\(frame.type.prefix(64))`")
        }
        if case .hello = request { return ClientMessage(id: frame.id ?? 0, request) }
        return ClientMessage(id: try need(frame.id, "id"), request)
    }

    /// Decodes a daemon frame.
    /// - Throws: ``SessionError`` `malformedMessage` naming what is wrong.
    public static func decodeServer(_ bytes: [UInt8]) throws(SessionError) -> ServerMessage {
        let frame = try wire(bytes)
        func need<T>(_ value: T?, _ field: String) throws(SessionError) -> T {
            guard let value else { throw SessionError(.malformedMessage, "`\(frame.type)` needs `\(field)`") }
            return value
        }
        switch frame.type {
        case "welcome":
            return .welcome(
                version: try need(frame.version, "version"), session: try need(frame.session, "session"),
                acknowledged: frame.acknowledged ?? 0)
        case "ok":
            return .ok(
                id: try need(frame.id, "id"), taskIDs: frame.tasks ?? [], tasks: frame.taskList ?? [],
                position: SessionPosition(lastSequence: frame.lastSeq ?? 0, acknowledged: frame.acknowledged ?? 0))
        case "error":
            return .error(
                id: frame.id, SessionError(SessionError.Code(rawValue: try need(frame.code, "code")), frame.detail ?? ""))
        case "event":
            return .event(try need(frame.event, "event"))
        default:
            throw SessionError(.malformedMessage, "unknown message type `\(frame.type.prefix(64))`")
        }
    }

    private static func wire(_ bytes: [UInt8]) throws(SessionError) -> WireFrame {
        do {
            return try JSONDecoder().decode(WireFrame.self, from: Data(bytes))
        } catch {
            throw SessionError(.malformedMessage, "not a protocol frame: \(describe(error))")
        }
    }

    private static func describe(_ error: any Error) -> String {
        switch error {
        case DecodingError.keyNotFound(let key, _): return "missing `\(key.stringValue)`"
        case DecodingError.typeMismatch(_, let context), DecodingError.valueNotFound(_, let context):
            return "wrong type at `\(context.codingPath.map(\.stringValue).joined(separator: "."))`"
        case DecodingError.dataCorrupted: return "invalid JSON"
        default: return "undecodable"
        }
    }

    private static func json(_ frame: WireFrame) -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        // Every field is a string, number, bool, array or object of those: encoding cannot fail.
        return (try? Array(encoder.encode(frame))) ?? Array("{\"type\":\"error\"}".utf8)
    }
}
