import Glibc
import HTTPClient

/// Injected file-system faults for tests (issue #13, defect 9), passed to one download through its
/// ``FileIOHooks`` (``DownloadConfiguration/fileIO``), never looked up process-wide: `fdatasync` of chosen
/// files fails with `EIO` after a number of successes, and the size each file had at its last
/// successful sync is remembered. Two downloads with different fault sets never see each other's.
@_spi(DownloadKitInternal) public final class FileIOFaults: Sendable {
    private struct Rule {
        var pathSuffix: String
        var successesLeft: Int
        var lastSyncedSize: Int64 = -1
    }

    private let rules = LockedValue<[Rule]>([])

    /// An empty set of faults.
    public init() {}

    /// From now on, `fdatasync` of a file whose path ends with `suffix` succeeds `successes` times,
    /// then fails with `EIO` every time.
    public func failDataSync(forPathEndingWith suffix: String, after successes: Int) {
        rules.withLock { $0.append(Rule(pathSuffix: suffix, successesLeft: successes)) }
    }

    /// The size the file had at its last successful `fdatasync` under a rule, or -1.
    public func lastSyncedSize(forPathEndingWith suffix: String) -> Int64 {
        rules.withLock { rules in rules.first { $0.pathSuffix == suffix }?.lastSyncedSize ?? -1 }
    }

    /// Called before `fdatasync`: the error to fail with, if a rule says so.
    func injectedDataSyncError(path: String) -> DKErrno? {
        rules.withLock { rules in
            guard let index = rules.firstIndex(where: { path.hasSuffix($0.pathSuffix) }) else { return nil }
            if rules[index].successesLeft <= 0 { return DKErrno(rawValue: EIO) }
            rules[index].successesLeft -= 1
            return nil
        }
    }

    /// Called after a successful `fdatasync` of `fd`.
    func recordDataSync(path: String, fd: Int32) {
        rules.withLock { rules in
            guard let index = rules.firstIndex(where: { path.hasSuffix($0.pathSuffix) }) else { return }
            var st = stat()
            if fstat(fd, &st) == 0 { rules[index].lastSyncedSize = Int64(st.st_size) }
        }
    }
}
