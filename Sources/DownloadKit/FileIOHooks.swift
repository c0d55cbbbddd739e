import Glibc
import HTTPClient

/// What one download's writes go through besides the system calls (issue #46, the file-system seam): the
/// write fence of a fleet worker's lease and, in tests, injected faults. A value in
/// ``DownloadConfiguration/fileIO`` that the engine hands to the file layer (the partial's handle, the
/// record, the final rename, the removal of the working files) — no process-wide registry is consulted,
/// so two downloads in one process with different hooks never see each other's fence or faults.
///
/// Empty by default: an unfenced download without faults pays one `nil` check per write.
@_spi(DownloadKitInternal) public struct FileIOHooks: Sendable {
    /// The fence every write of the download's working files is checked against (``WriteFence``), or nil.
    /// Set by a fleet worker for the download it runs under a lease.
    public var fence: WriteFence?
    /// Faults to inject (tests), or nil.
    public var faults: FileIOFaults?

    /// Hooks with the given fence and faults (both optional).
    public init(fence: WriteFence? = nil, faults: FileIOFaults? = nil) {
        self.fence = fence
        self.faults = faults
    }

    /// Whether a fence must admit each write: the body is then never spliced by the kernel past the
    /// fence (issue #19).
    var guardsWrites: Bool { fence != nil }

    /// Whether a write of kind `kind` may be made now: true without a fence.
    func admits(_ kind: WriteFence.Operation = .write) -> Bool {
        fence?.admit(kind) ?? true
    }

    /// Throws `EPERM` for `operation` on `path` when the fence refuses.
    func check(_ operation: String, _ path: String, _ kind: WriteFence.Operation = .write) throws(FileSystemError) {
        if !admits(kind) {
            throw FileSystemError(operation + " (fenced: the lease on this download is lost)", path: path, errorNumber: .notPermitted)
        }
    }

    /// `fdatasync(fd)` of `path`: checked against the fence as a checkpoint, an injected fault thrown
    /// instead of the call, the synced size recorded for the faults after it.
    func syncData(_ fd: Int32, path: String) throws(FileSystemError) {
        try check("fdatasync", path, .checkpoint)
        if let injected = faults?.injectedDataSyncError(path: path) {
            throw FileSystemError("fdatasync", path: path, errorNumber: injected)
        }
        if let failure = retryingInterrupts({ fdatasync(fd) }).errno {
            throw FileSystemError("fdatasync", path: path, errorNumber: failure)
        }
        faults?.recordDataSync(path: path, fd: fd)
    }
}
