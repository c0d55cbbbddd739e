import HTTPClient
import HTTPWire

/// Where a download keeps its working files — the one rule (issue #12), used by the engine, the manager
/// (what `cancel` and `remove` delete) and the CLI:
///
/// - a `.file(path)` destination works beside it: `<dir>/<name>.dkpart`, `<dir>/<name>.dkresume`,
///   `<dir>/<name>.dkjournal` (segment journal), where `<dir>` is the request's working directory when
///   it names one, else the destination's directory;
/// - a `.directory(dir)` destination, whose final name the response decides, uses a stem from the URL
///   (without userinfo): `dk-<md5 of the URL>.dkpart` and so on, in the working directory or `dir`.
///
/// The suffixes are reserved (``FileNaming/reservedSuffixes``): no server-chosen name can take them.
@_spi(DownloadKitInternal) public struct WorkingFiles: Hashable, Sendable {
    /// The partial file the body is written into, renamed onto the destination when complete.
    @_spi(DownloadKitInternal) public var partial: String
    /// The resume-info property list beside it.
    @_spi(DownloadKitInternal) public var resumeInfo: String
    /// The directory holding both (fsynced after they are created or renamed).
    @_spi(DownloadKitInternal) public var directory: String

    /// The segment journal beside the partial.
    @_spi(DownloadKitInternal) public var journal: String { SegmentJournal.path(forTempFile: partial) }

    /// The directory the working files of `destination` go into, without deriving their names.
    @_spi(DownloadKitInternal) public static func directory(of destination: DownloadDestination, workingDirectory: String?) -> String {
        switch destination {
        case .file(let path): workingDirectory ?? FileSystem.directory(of: path)
        case .directory(let folder, _): workingDirectory ?? folder
        }
    }

    /// The working files of `destination`, for the request whose original URL is `url`.
    @_spi(DownloadKitInternal) public init(destination: DownloadDestination, workingDirectory: String?, url: HTTPURL) {
        directory = Self.directory(of: destination, workingDirectory: workingDirectory)
        let stem: String
        switch destination {
        case .file(let path):
            stem = FileSystem.lastComponent(of: path)
        case .directory:
            stem = "dk-" + DKDigest.hex(DKDigest.hash(.md5, Array(url.withoutUserinfo.absoluteString.utf8)))
        }
        partial = FileSystem.join(directory, stem + ".dkpart")
        resumeInfo = FileSystem.join(directory, stem + ".dkresume")
    }

    /// The working files of a `.file` destination with no separate working directory (the CLI's case).
    @_spi(DownloadKitInternal) public init(besideFile path: String) {
        directory = FileSystem.directory(of: path)
        let stem = FileSystem.lastComponent(of: path)
        partial = FileSystem.join(directory, stem + ".dkpart")
        resumeInfo = FileSystem.join(directory, stem + ".dkresume")
    }
}
