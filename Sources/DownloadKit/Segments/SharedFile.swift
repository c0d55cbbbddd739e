/// A file descriptor handed to another thread: the background checkpoint's `fdatasync`, which the engine
/// waits for (`checkpointQueue.sync`) before it moves, removes or closes the file; hence
/// `@unchecked Sendable`.
struct SharedFile: @unchecked Sendable {
    let handle: FileHandleFD
}
