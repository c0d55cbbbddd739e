import Glibc
import HTTPClient

/// A syscall seam for tests (issue #13, defect 9): makes `fdatasync` of chosen files fail with `EIO`
/// after a number of successes, and remembers how many bytes each file held at its last successful
/// sync. Empty (one lock and an `isEmpty` check per sync) unless a test installs a rule.
enum FileIOFaults {
    struct Rule {
        var pathSuffix: String
        var successesLeft: Int
        var lastSyncedSize: Int64 = -1
    }

    static let rules = LockedValue<[Rule]>([])

    /// From now on, `fdatasync` of a file whose path ends with `suffix` succeeds `successes` times,
    /// then fails with `EIO` every time.
    static func failDataSync(forPathEndingWith suffix: String, after successes: Int) {
        rules.withLock { $0.append(Rule(pathSuffix: suffix, successesLeft: successes)) }
    }

    /// The size the file had at its last successful `fdatasync` under a rule, or -1.
    static func lastSyncedSize(forPathEndingWith suffix: String) -> Int64 {
        rules.withLock { rules in rules.first { $0.pathSuffix == suffix }?.lastSyncedSize ?? -1 }
    }

    /// Removes the rule for `suffix`.
    static func clear(forPathEndingWith suffix: String) {
        rules.withLock { $0.removeAll { $0.pathSuffix == suffix } }
    }

    /// Called before `fdatasync`: the `errno` to fail with, if a rule says so.
    static func injectedDataSyncError(path: String) -> Int32? {
        rules.withLock { rules in
            guard let index = rules.firstIndex(where: { path.hasSuffix($0.pathSuffix) }) else { return nil }
            if rules[index].successesLeft <= 0 { return EIO }
            rules[index].successesLeft -= 1
            return nil
        }
    }

    /// Called after a successful `fdatasync` of `fd`.
    static func recordDataSync(path: String, fd: Int32) {
        rules.withLock { rules in
            guard let index = rules.firstIndex(where: { path.hasSuffix($0.pathSuffix) }) else { return }
            var st = stat()
            if fstat(fd, &st) == 0 { rules[index].lastSyncedSize = Int64(st.st_size) }
        }
    }
}
