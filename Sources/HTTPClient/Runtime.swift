// The runtime layer below this module (Sources/Runtime): `Deadline`, `DKErrno`, `SystemCallError`, the lock
// and wait/wake primitive, the thread bridge. Re-exported so every module that imports HTTPClient keeps
// seeing them where they were before they moved.
@_exported import DownloadKitRuntime
