/// Where a download's file ends up.
public enum DownloadDestination: Sendable, Hashable {
    /// Exactly this path. Partial data lives beside it as `<path>.dkpart` and `<path>.dkresume`.
    case file(String)
    /// A file inside this directory, named by the ``FileNamingRule``. Nothing is ever written outside it.
    case directory(String, naming: FileNamingRule)
}

/// How a download in a directory is named (YCDownloadManager's conventions, plus the server's suggestion).
public enum FileNamingRule: Sendable, Hashable {
    /// The server's `Content-Disposition` name (`filename*` first), else the URL path's last segment,
    /// else the MD5 of the URL; always sanitised to one safe path component.
    case fromResponse
    /// A caller-given file id (sanitised) plus the URL path's extension.
    case fileID(String)
    /// The MD5 of the URL plus the URL path's extension.
    case md5OfURL
}
