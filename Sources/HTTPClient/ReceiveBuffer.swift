internal import CDownloadKitSystem
import Glibc

/// A receive buffer owned by one thread and reused across exchanges, so a transfer allocates it once.
///
/// Not `Sendable`: it belongs to the thread that runs the exchanges.
public final class ReceiveBuffer {
    let storage: UnsafeMutableRawBufferPointer
    /// The pipe used to splice bodies into files, taken on first use and kept (empty) between uses.
    private var pipe: SplicePipePool.Pipe?

    /// Allocates `capacity` bytes (at least 64 KiB, so one TLS record always fits).
    public init(capacity: Int = 1 << 20) {
        storage = UnsafeMutableRawBufferPointer.allocate(byteCount: max(64 << 10, capacity), alignment: 64)
    }

    /// The buffer size in bytes.
    public var capacity: Int { storage.count }

    deinit {
        storage.deallocate()
        // Kept pipes are empty (a failure with bytes in it discards it): the next transfer may take it.
        if let pipe { SplicePipePool.shared.giveBack(pipe) }
    }

    /// The splice pipe, sized like the buffer (best effort): an empty one an earlier transfer gave back,
    /// else a new one.
    func splicePipe() throws(TransportError) -> SplicePipePool.Pipe {
        if let pipe { return pipe }
        let requested = min(storage.count, 1 << 20)
        if let kept = SplicePipePool.shared.take(requested: requested) {
            pipe = kept
            return kept
        }
        var fds: [Int32] = [-1, -1]
        let capacity = dk_splice_pipe(&fds, Int32(requested))
        guard capacity > 0 else {
            throw TransportError(.systemCall, errorNumber: .current, operation: "pipe2", detail: "could not create a splice pipe")
        }
        let created = (read: fds[0], write: fds[1], capacity: Int(capacity), requested: requested)
        pipe = created
        return created
    }

    /// Closes the pipe (after a failure that may have left bytes in it).
    func discardPipe() {
        if let pipe {
            close(pipe.read)
            close(pipe.write)
        }
        pipe = nil
    }
}
