internal import CDownloadKitSystem
import Glibc

/// Empty splice pipes that ended transfers gave back, for the next ones: a pipe per transfer cost
/// `pipe2`, `F_SETPIPE_SZ` and two `close` calls per file — visible among thousands of small files
/// (issue #18). At most ``capacity`` are kept (two descriptors each); only pipes known to be empty come
/// back (``ReceiveBuffer/discardPipe()`` closes one a failure may have left bytes in).
final class SplicePipePool: Sendable {
    /// A pipe: its two ends, the capacity the kernel granted and the one that was asked for.
    typealias Pipe = (read: Int32, write: Int32, capacity: Int, requested: Int)

    static let shared = SplicePipePool(capacity: 16)

    let capacity: Int
    private let kept = LockedValue<[Pipe]>([])

    init(capacity: Int) {
        self.capacity = capacity
    }

    /// A kept pipe asked for with the same size, if any.
    func take(requested: Int) -> Pipe? {
        kept.withLock { pipes in
            guard let index = pipes.lastIndex(where: { $0.requested == requested }) else { return nil }
            return pipes.remove(at: index)
        }
    }

    /// Keeps an empty pipe for a later transfer, or closes it when enough are kept. Emptiness is checked
    /// here too (`FIONREAD`), so no path that forgot to discard a pipe can hand one body's bytes to another.
    func giveBack(_ pipe: Pipe) {
        let keptIt = dk_pipe_pending(pipe.read) == 0 && kept.withLock { pipes in
            guard pipes.count < capacity else { return false }
            pipes.append(pipe)
            return true
        }
        if !keptIt {
            close(pipe.read)
            close(pipe.write)
        }
    }

    /// How many pipes are kept now (tests).
    var keptCount: Int { kept.withLock { $0.count } }
}
