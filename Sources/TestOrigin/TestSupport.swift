import Foundation

/// A directory under the system temp directory, removed when the value is released (tests).
public final class ScratchDirectory: Sendable {
    public let path: String

    public init() throws {
        path = FileManager.default.temporaryDirectory.appendingPathComponent("dk-engine-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }

    deinit { try? FileManager.default.removeItem(atPath: path) }

    public func file(_ name: String) -> String { path + "/" + name }

    /// The names in the directory, sorted.
    public var contents: [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []).sorted()
    }

    public func size(_ name: String) -> Int64? {
        (try? FileManager.default.attributesOfItem(atPath: file(name))[.size] as? Int64) ?? nil
    }
}

/// Whether the file at `path` holds exactly the TestPattern bytes for `size` and `seed`.
public func fileMatchesPattern(_ path: String, size: Int64, seed: UInt64) -> Bool {
    guard let data = FileManager.default.contents(atPath: path), Int64(data.count) == size else { return false }
    return data.withUnsafeBytes { TestPattern.firstMismatch(in: $0, offset: 0, seed: seed) == nil }
}


/// Runs blocking work (waiting for a child process, polling a file) on its own thread and awaits it,
/// so tests never hold one of the few cooperative-pool threads (2 on a 2-core machine) for seconds and
/// starve the async tests running beside them.
public func offloaded<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        let thread = Thread {
            continuation.resume(with: Result { try body() })
        }
        thread.start()
    }
}

/// This process's resident set size in bytes (`/proc/self/statm`), or 0 when unreadable.
public func residentMemoryBytes() -> Int64 {
    guard let text = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) else { return 0 }
    let fields = text.split(separator: " ")
    guard fields.count > 1, let pages = Int64(fields[1]) else { return 0 }
    return pages * Int64(sysconf(Int32(_SC_PAGESIZE)))
}

/// The fields of `/proc/PID/stat` from the third on (state, ppid, … utime is index 11, stime 12; proc(5)),
/// or nil when the process is gone or the file cannot be read. The command name (field 2) is in
/// parentheses and may hold spaces and parentheses itself, so the fields are counted from after its last `)`.
public func processStatFields(_ pid: pid_t) -> [Substring]? {
    guard let text = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
        let close = text.lastIndex(of: ")")
    else { return nil }
    return text[text.index(after: close)...].split(separator: " ")
}

/// The path of an executable product (e.g. `downloadkit`) built beside the test bundle by
/// `swift build --build-tests`, or nil: looked for next to the running test binary, the main bundle and
/// every loaded `.xctest` bundle.
public func builtExecutable(named name: String) -> String? {
    var candidates: [URL] = []
    candidates.append(URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent(name))
    candidates.append(Bundle.main.bundleURL.deletingLastPathComponent().appendingPathComponent(name))
    for bundle in Bundle.allBundles where bundle.bundlePath.hasSuffix(".xctest") {
        candidates.append(bundle.bundleURL.deletingLastPathComponent().appendingPathComponent(name))
    }
    return candidates.map(\.path).first { FileManager.default.isExecutableFile(atPath: $0) }
}
