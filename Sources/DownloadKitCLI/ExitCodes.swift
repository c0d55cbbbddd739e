import ArgumentParser
import DownloadKit
import DownloadKitManager

/// Exit statuses, grouped by cause (documented in `--help`).
public enum Exit {
    /// A failure that is none of the categories below.
    public static let failure: Int32 = 1
    static let httpStatus: Int32 = 3
    static let network: Int32 = 4
    static let tls: Int32 = 5
    static let redirect: Int32 = 6
    static let checksum: Int32 = 7
    static let protocolViolation: Int32 = 8
    static let space: Int32 = 9
    static let fileSystem: Int32 = 10
    static let inUse: Int32 = 11
    static let interrupted: Int32 = 130
    static let terminated: Int32 = 143

    /// The exit status for a download error: one per ``DownloadError/Category`` (the library classifies).
    public static func status(for error: DownloadError) -> Int32 {
        status(for: error.category)
    }

    /// The exit status for a managed task's error (`queue list --json` shows it): the same table, from the
    /// stored ``ManagedTaskError/category``.
    public static func status(for error: ManagedTaskError) -> Int32 {
        status(for: error.category)
    }

    /// The one table: a status per ``DownloadError/Category``.
    public static func status(for category: DownloadError.Category) -> Int32 {
        switch category {
        case .httpStatus: httpStatus
        case .network: network
        case .tls: tls
        case .redirect: redirect
        case .integrity: checksum
        case .protocolViolation: protocolViolation
        case .space: space
        case .fileSystem: fileSystem
        case .inUse: inUse
        case .stopped, .other: failure
        }
    }
}

extension ExitCode {
    static let table = """
        EXIT STATUS
          0    every file downloaded and verified
          1    other failure
          3    the server answered with an HTTP error status
          4    network failure or timeout (connection refused, reset, closed early, too slow)
          5    TLS failure (certificate expired, wrong host, untrusted, handshake)
          6    redirect problem (too many, loop, https to http, unsupported scheme)
          7    checksum mismatch (--checksum or the server's Content-MD5)
          8    the server broke HTTP or range rules (bad Content-Range, malformed response)
          9    not enough disk space / disk full (partial data kept; rerun to resume)
          10   file-system error (permissions, missing directory)
          11   the file is in use by another download (its partial file is locked; nothing touched)
          64   usage error
          130  interrupted by Ctrl-C (progress checkpointed; rerun to resume)
          143  terminated by SIGTERM (progress checkpointed; rerun to resume)
        """
}
