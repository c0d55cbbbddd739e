@_spi(DownloadKitInternal) import DownloadKit
import DownloadKitManager
import Foundation
import HTTPClient

/// aria2 GIDs for manager tasks: 16 lowercase hex digits derived from the task id, so a GID is stable
/// across restarts without a mapping table. A UUID task id gives its first 16 hex digits (60 random
/// bits); any other id gives the FNV-1a 64-bit hash of its UTF-8 bytes.
public enum Aria2GID {
    /// The GID of a task id.
    public static func gid(forTaskID id: String) -> String {
        let hex = id.lowercased().filter { $0 != "-" }
        if hex.count == 32, hex.allSatisfy(\.isHexDigit) { return String(hex.prefix(16)) }
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in id.utf8 {
            hash ^= UInt64(byte)
            hash &*= 0x0000_0100_0000_01b3
        }
        let text = String(hash, radix: 16)
        return String(repeating: "0", count: 16 - text.count) + text
    }

    /// Whether `text` is GID-shaped (aria2 answers `Invalid GID …` otherwise).
    public static func isValid(_ text: String) -> Bool {
        text.utf8.count == 16 && text.allSatisfy(\.isHexDigit)
    }
}

/// aria2's status names for manager states.
public enum Aria2Status {
    /// `waiting→waiting`, `running→active`, `paused→paused`, `completed→complete`, `failed→error`,
    /// `cancelled→removed`.
    public static func name(_ state: ManagedTaskState) -> String {
        switch state {
        case .waiting: "waiting"
        case .running: "active"
        case .paused: "paused"
        case .completed: "complete"
        case .failed: "error"
        case .cancelled: "removed"
        }
    }

    /// Whether aria2 lists the state under `tellStopped` (complete, error, removed).
    public static func isStopped(_ state: ManagedTaskState) -> Bool {
        state == .completed || state == .failed || state == .cancelled
    }

    /// aria2's `errorCode` of a stopped task: `31` for a removed one (aria2's "removed" result), else
    /// ``errorCode(_:)`` of its error.
    public static func errorCode(of task: ManagedTask) -> String {
        task.state == .cancelled ? "31" : errorCode(task.error)
    }

    /// The notification aria2 sends when a download goes from `previous` (nil when not seen) to
    /// `state`: `onDownloadStop` only for a download that was running (aria2 sends nothing when a
    /// waiting or paused one is removed), none for `waiting`.
    public static func notification(from previous: ManagedTaskState?, to state: ManagedTaskState) -> String? {
        switch state {
        case .running: "aria2.onDownloadStart"
        case .paused: "aria2.onDownloadPause"
        case .cancelled: previous == .running ? "aria2.onDownloadStop" : nil
        case .completed: "aria2.onDownloadComplete"
        case .failed: "aria2.onDownloadError"
        case .waiting: nil
        }
    }

    /// aria2's exit code (its `errorCode`) for a task's error, decided from its typed fields alone (the
    /// category first, then the HTTP status, the code or the cause; never the message): docs/RPC.md has
    /// the table. `0` for no error.
    public static func errorCode(_ error: ManagedTaskError?) -> String {
        guard let error else { return "0" }
        return String(aria2Code(error).rawValue)
    }

    /// aria2's exit codes that DownloadKit's errors map to (aria2's `error_code::Value`).
    public enum Aria2ErrorCode: Int, Sendable, CaseIterable {
        case unknown = 1
        case timeout = 2
        case resourceNotFound = 3
        case tooSlow = 5
        case network = 6
        case resumeNotSupported = 8
        case notEnoughDiskSpace = 9
        case duplicateDownload = 11
        case fileAlreadyExists = 13
        case fileOpen = 15
        case fileCreate = 16
        case fileIO = 17
        case directoryCreate = 18
        case nameResolution = 19
        case httpProtocol = 22
        case tooManyRedirects = 23
        case httpAuthorization = 24
        case serviceUnavailable = 29
        case checksum = 32
    }

    /// The one mapping from a task's error to aria2's code.
    public static func aria2Code(_ error: ManagedTaskError) -> Aria2ErrorCode {
        switch error.category {
        case .httpStatus:
            switch error.httpStatus {
            case 404, 410: return .resourceNotFound
            case 401, 407: return .httpAuthorization
            case 503: return .serviceUnavailable
            default: return .httpProtocol
            }
        case .network, .tls:
            if error.code == .tooSlow { return .tooSlow }
            if error.cause?.isTimeout == true { return .timeout }
            if error.cause?.isNameResolution == true { return .nameResolution }
            return .network
        case .redirect:
            return error.code == .tooManyRedirects ? .tooManyRedirects : .unknown
        case .integrity:
            return .checksum
        case .protocolViolation:
            return error.code == .protocolViolation ? .httpProtocol : .resumeNotSupported
        case .space:
            return .notEnoughDiskSpace
        case .fileSystem:
            guard let cause = error.cause, cause.layer == .fileSystem || cause.layer == .bodyWrite else { return .fileOpen }
            if cause.errorNumber == .fileExists { return .fileAlreadyExists }
            switch cause.operation {
            case "mkdir": return .directoryCreate
            case "open", "openat": return .fileCreate
            case "pwrite", "write", "splice", "fsync", "fdatasync", "read", "pread": return .fileIO
            default: return .fileOpen
            }
        case .inUse:
            return .duplicateDownload
        case .stopped, .other:
            return .unknown
        }
    }
}

/// Parses aria2 size values: `0`, `1048576`, `10K`, `2M`, `1G` (binary multiples, as aria2).
public enum Aria2Size {
    public static func parse(_ text: String) -> Int? {
        var digits = Substring(text.trimmingCharacters(in: .whitespaces))
        var unit = 1
        switch digits.last {
        case "K", "k": unit = 1 << 10
        case "M", "m": unit = 1 << 20
        case "G", "g": unit = 1 << 30
        default: break
        }
        if unit != 1 { digits = digits.dropLast() }
        guard !digits.isEmpty, digits.allSatisfy(\.isASCII), let value = Int(digits), value >= 0 else { return nil }
        let (product, overflow) = value.multipliedReportingOverflow(by: unit)
        return overflow ? nil : product
    }
}

/// The aria2 options of one `addUri`/`changeOption` call that DownloadKit acts on. Options it does not
/// know are ignored, as aria2 ignores them; a known option with a bad value is refused with aria2's
/// message.
public struct Aria2TaskOptions: Sendable, Hashable {
    public var dir: String?
    public var out: String?
    public var headers: [String: String] = [:]
    public var checksum: Checksum?
    /// `max-download-limit` in bytes per second; 0 means unlimited.
    public var maxDownloadLimit: Int?
    /// `pause: true` adds the task paused.
    public var pause = false
    /// `split`: the task's connection count (``ManagedTask/connections``), 1…64.
    public var split: Int?
    /// `max-connection-per-server`: the task's connections per source
    /// (``ManagedTask/connectionsPerSource``), 1…16 as aria2 allows.
    public var maxConnectionPerServer: Int?
    /// `max-tries`, `timeout`: validated; DownloadKit applies these per manager, not per task (see
    /// docs/RPC.md).
    public var maxTries: Int?
    public var timeout: Int?
    /// `allow-overwrite=true`: an existing file at `dir/out` may be replaced (aria2's default: false).
    public var allowOverwrite = false
    /// `auto-file-renaming` (aria2's default: true): an existing file at `dir/out` makes the download
    /// `name.1.ext`, `name.2.ext`, …; when false such an `addUri` is refused.
    public var autoFileRenaming = true

    public init() {}

    /// Reads the options object (values are strings; `header` may be an array of strings).
    public init(_ options: [String: JSONValue]) throws(RPCError) {
        for (name, value) in options {
            switch name {
            case "dir": dir = try Self.string(name, value)
            case "out": out = try Self.string(name, value)
            case "header":
                let lines: [String]
                if let array = value.arrayValue {
                    lines = try array.map { item throws(RPCError) in try Self.string(name, item) }
                } else {
                    lines = try Self.string(name, value).split(separator: "\n").map(String.init)
                }
                for line in lines {
                    guard let colon = line.firstIndex(of: ":") else { throw Self.bad(name) }
                    let field = line[..<colon].trimmingCharacters(in: .whitespaces)
                    guard !field.isEmpty else { throw Self.bad(name) }
                    headers[field] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
                }
            case "checksum":
                // aria2 spells algorithms `sha-256`, `sha-1`, `md5`.
                let text = try Self.string(name, value).replacingOccurrences(of: "-", with: "")
                guard let parsed = Checksum(parsing: text) else { throw Self.bad(name) }
                checksum = parsed
            case "max-download-limit":
                guard let limit = Aria2Size.parse(try Self.string(name, value)) else { throw Self.bad(name) }
                maxDownloadLimit = limit
            case "pause":
                pause = try Self.bool(name, value)
            case "split": split = try Self.count(name, value, in: Self.splitRange)
            case "max-connection-per-server":
                maxConnectionPerServer = try Self.count(name, value, in: Self.connectionsPerServerRange)
            case "max-tries": maxTries = try Self.count(name, value)
            case "timeout": timeout = try Self.positive(name, value)
            case "allow-overwrite": allowOverwrite = try Self.bool(name, value)
            case "auto-file-renaming": autoFileRenaming = try Self.bool(name, value)
            default: break
            }
        }
        if let out, out.isEmpty || out.contains("/") || out == "." || out == ".." { throw Self.bad("out") }
    }

    /// The task these options ask for: `url` with its `mirrors`, `destination` and `checksum`, the
    /// options' headers, rate limit, `split` and `max-connection-per-server`; a live download of the URL is reused (two transfers would
    /// share one partial file; a stopped one stays in tellStopped and a new download is made, as aria2),
    /// and with `pause` the task is made paused, never started (enqueue-then-pause let the scheduler
    /// start it in between).
    func taskRequest(
        url: String, mirrors: [String], destination: DownloadDestination, checksum: Checksum?
    ) -> DownloadManager.TaskRequest {
        var request = DownloadManager.TaskRequest(
            url: url, destination: destination, checksum: checksum, headers: headers,
            rateLimit: maxDownloadLimit.flatMap { $0 > 0 ? $0 : nil })
        request.mirrors = mirrors
        request.connections = split
        request.connectionsPerSource = maxConnectionPerServer
        request.reusesLiveTaskOnly = true
        request.startsPaused = pause
        return request
    }

    /// aria2's message for an option it could not use.
    static func bad(_ name: String) -> RPCError {
        .aria2("We encountered a problem while processing the option '--\(name)'.")
    }

    private static func string(_ name: String, _ value: JSONValue) throws(RPCError) -> String {
        if let text = value.stringValue { return text }
        if let number = value.intValue { return String(number) }
        throw bad(name)
    }

    private static func bool(_ name: String, _ value: JSONValue) throws(RPCError) -> Bool {
        if case .bool(let flag) = value { return flag }
        let text = try string(name, value)
        guard text == "true" || text == "false" else { throw bad(name) }
        return text == "true"
    }

    /// What `split` accepts: the engine's connection counts (aria2 has no upper bound).
    public static let splitRange: ClosedRange<Int64> = 1...64
    /// What `max-connection-per-server` accepts (aria2's range).
    public static let connectionsPerServerRange: ClosedRange<Int64> = 1...16

    /// A count within `range` (a number outside it, or beyond 64 bits, is refused, never trapped on).
    private static func count(
        _ name: String, _ value: JSONValue, in range: ClosedRange<Int64> = RPCParams.countRange
    ) throws(RPCError) -> Int {
        guard let number = Int64(try string(name, value)), range.contains(number) else { throw bad(name) }
        return Int(number)
    }

    private static func positive(_ name: String, _ value: JSONValue) throws(RPCError) -> Int {
        let number = try count(name, value)
        guard number > 0 else { throw bad(name) }
        return number
    }

    /// The destination these options ask for, as given (a directory destination is named from the response).
    public func destination(defaultDirectory: String) -> DownloadDestination {
        switch (dir, out) {
        case (let dir?, let out?): .file(dir + "/" + out)
        case (nil, let out?): .file(defaultDirectory + "/" + out)
        case (let dir?, nil): .directory(dir, naming: .fromResponse)
        case (nil, nil): .directory(defaultDirectory, naming: .fromResponse)
        }
    }

    /// The destination with aria2's rule for a file that is already there: a `dir`/`out` path where
    /// `exists` finds a file (of any type) is kept, and the download goes to the first free
    /// `name.N.ext` (N = 1…9999, the extension after the last dot of the name, as aria2c 1.37 names
    /// `existing.1.txt`) — unless `allow-overwrite=true`. With `auto-file-renaming=false` it is refused.
    /// A path with only its partial data (`path.dkpart`, no file) is not renamed: that download resumes.
    public func destination(
        defaultDirectory: String, exists: (String) -> Bool
    ) throws(RPCError) -> DownloadDestination {
        let chosen = destination(defaultDirectory: defaultDirectory)
        guard case .file(let path) = chosen, !allowOverwrite, exists(path) else { return chosen }
        guard autoFileRenaming else {
            throw .aria2("File \((path as NSString).lastPathComponent) exists and auto-file-renaming is false; set allow-overwrite=true to replace it.")
        }
        for number in 1...9999 {
            let candidate = Self.renamed(path, number)
            if !exists(candidate) && !exists(candidate + ".dkpart") { return .file(candidate) }
        }
        throw .aria2("File \((path as NSString).lastPathComponent) exists and no free name.N.ext is left (N up to 9999).")
    }

    /// `dir/name.ext` → `dir/name.N.ext`; `dir/name` → `dir/name.N`; a leading dot is not an extension.
    static func renamed(_ path: String, _ number: Int) -> String {
        let slash = path.lastIndex(of: "/").map { path.index(after: $0) } ?? path.startIndex
        if let dot = path[slash...].lastIndex(of: "."), dot > slash {
            return "\(path[..<dot]).\(number)\(path[dot...])"
        }
        return "\(path).\(number)"
    }
}

/// Whether something is at a path, the link itself for a symbolic link (the effect `addUri` is given).
enum FileProbe {
    static func exists(_ path: String) -> Bool {
        var info = stat()
        return lstat(path, &info) == 0
    }
}

/// What RPC answers show of credentials: aria2 front ends display URIs and options, and a page of
/// another origin may read answers (with `--rpc-allow-origin-all`), so userinfo and credential headers
/// are masked in every answer (docs/RPC.md, "Credentials in answers").
public enum Aria2Redaction {
    /// The mask put where a secret was.
    public static let mask = "***"
    /// Headers whose values are credentials.
    public static let credentialHeaders: Set<String> = ["authorization", "proxy-authorization", "cookie"]

    /// A URI with its userinfo masked: `http://user:pass@host/` → `http://user:***@host/`; a userinfo with
    /// no password (often a token: `https://TOKEN@host/`) → `http://***@host/`. Text that is not an
    /// absolute URI with an authority is returned unchanged (it has no userinfo to mask).
    public static func uri(_ text: String) -> String {
        guard let scheme = text.range(of: "://") else { return text }
        let authorityStart = scheme.upperBound
        let authorityEnd = text[authorityStart...].firstIndex(where: { $0 == "/" || $0 == "?" || $0 == "#" }) ?? text.endIndex
        guard let at = text[authorityStart..<authorityEnd].lastIndex(of: "@") else { return text }
        let userinfo = text[authorityStart..<at]
        let masked: String
        if let colon = userinfo.firstIndex(of: ":") {
            masked = userinfo[..<colon] + ":" + mask
        } else {
            masked = mask
        }
        return text[..<authorityStart] + masked + text[at...]
    }

    /// A header value as answers show it: masked for ``credentialHeaders``.
    public static func headerValue(name: String, _ value: String) -> String {
        credentialHeaders.contains(name.lowercased()) ? mask : value
    }
}

/// Builds aria2's result objects from manager tasks.
public enum Aria2Shapes {
    /// aria2's fixed piece length for HTTP downloads (1 MiB).
    public static let pieceLength: Int64 = 1 << 20

    /// The directory a task's file goes to.
    public static func directory(of task: ManagedTask) -> String {
        switch task.destination {
        case .file(let path): (path as NSString).deletingLastPathComponent
        case .directory(let directory, _): directory
        }
    }

    /// The file a directory download writes, once its name is decided: read from the record its partial
    /// file keeps (the `.dkresume` after a checkpoint, before that the partial's own record), which the
    /// core validates as one safe path component. Nil before the first response names it (aria2 shows
    /// `""` then), and for a download that has not started.
    public static func decidedPath(of task: ManagedTask) -> String? {
        guard case .directory(let directory, _) = task.destination, task.state == .running || task.bytesReceived > 0,
            let url = try? HTTPURL(task.originalURL)
        else { return nil }
        let working = WorkingFiles(destination: task.destination, workingDirectory: nil, url: url)
        let record = (try? ResumeInfo.read(from: working.resumeInfo)) ?? ResumeInfo.stored(onPartial: working.partial)
        guard let name = record?.fileName else { return nil }
        return directory + "/" + name
    }

    /// `getUris`: the task's URL, then its mirrors (DownloadKit spreads a transfer over all of them: each
    /// `used` once it started, else `waiting`).
    public static func uris(_ task: ManagedTask) -> JSONValue {
        let status = task.state == .waiting || (task.state == .paused && task.bytesReceived == 0) ? "waiting" : "used"
        return .array(
            ([task.currentURL] + task.mirrors).map {
                .object(["uri": .string(Aria2Redaction.uri($0)), "status": .string(status)])
            })
    }

    /// `getFiles`: one file (HTTP downloads have exactly one).
    public static func files(_ task: ManagedTask) -> JSONValue {
        .array([
            .object([
                "index": .string("1"), "path": .string(task.path ?? ""),
                "length": .string(String(task.totalBytes ?? 0)),
                "completedLength": .string(String(task.bytesReceived)), "selected": .string("true"),
                "uris": uris(task),
            ])
        ])
    }

    /// `tellStatus`: the full status object, or only `keys` when given (unknown keys are left out, as aria2).
    public static func status(
        _ task: ManagedTask, downloadSpeed: Int, connections: Int, keys: [String]? = nil
    ) -> JSONValue {
        let total = task.totalBytes ?? 0
        var object: [String: JSONValue] = [
            "gid": .string(Aria2GID.gid(forTaskID: task.id)),
            "status": .string(Aria2Status.name(task.state)),
            "totalLength": .string(String(total)),
            "completedLength": .string(String(task.bytesReceived)),
            "uploadLength": .string("0"),
            "downloadSpeed": .string(String(task.state == .running ? downloadSpeed : 0)),
            "uploadSpeed": .string("0"),
            "connections": .string(String(task.state == .running ? connections : 0)),
            // Divided, not rounded up by adding: a server's Content-Length can be Int64.max.
            "numPieces": .string(String(total / pieceLength + (total % pieceLength == 0 ? 0 : 1))),
            "pieceLength": .string(String(pieceLength)),
            "dir": .string(directory(of: task)),
            "files": files(task),
        ]
        if Aria2Status.isStopped(task.state) {
            object["errorCode"] = .string(Aria2Status.errorCode(of: task))
            object["errorMessage"] = .string(task.error?.message ?? "")
        }
        guard let keys else { return .object(object) }
        return .object(object.filter { keys.contains($0.key) })
    }
}

/// The URI list arithmetic of `changeUri`. Pure.
public enum Aria2URIList {
    /// The list after a change, and how many URIs were deleted and added.
    public struct Change: Sendable, Hashable {
        /// The URIs after the change, in order.
        public var uris: [String]
        /// How many of the URIs to delete were found and deleted (aria2's `numDeleted`).
        public var deletedCount: Int
        /// How many URIs were inserted (aria2's `numAdded`).
        public var addedCount: Int
    }

    /// Whether a URI can be a source (an http or https URL DownloadKit can request).
    public static func isUsable(_ text: String) -> Bool {
        (try? HTTPURL(text)) != nil
    }

    /// Deletes one occurrence of each of `deleting` (absent ones count nothing), then inserts `adding` in
    /// order at `position` (clamped to the list's end; nil appends), as aria2 counts them.
    public static func change(_ uris: [String], deleting: [String], adding: [String], at position: Int?) -> Change {
        var list = uris
        var deletedCount = 0
        for uri in deleting {
            if let index = list.firstIndex(of: uri) {
                list.remove(at: index)
                deletedCount += 1
            }
        }
        let insertAt = min(max(0, position ?? list.count), list.count)
        list.insert(contentsOf: adding, at: insertAt)
        return Change(uris: list, deletedCount: deletedCount, addedCount: adding.count)
    }
}
