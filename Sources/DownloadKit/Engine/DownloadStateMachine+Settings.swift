import DownloadKitDecisions
import HTTPClient
import HTTPWire

/// The download machine as the engine drives it: the decisions module's `DownloadStateMachine`, answering
/// with the library's ``DownloadError`` (`DownloadError.init(decided:)` gives each failure it decides its code
/// and message).
typealias EngineMachine = DownloadStateMachine<DownloadError>

/// The machine's settings made from the request and the configuration: the one place that reads
/// ``DownloadRequest`` and ``DownloadConfiguration`` for it, and computes what needs the client (the MD5 of a
/// URL that names a file, through ``DKDigest``).
extension DownloadStateMachine.Settings {
    /// `mirrors`: the request's mirrors, parsed and checked (``DownloadError/validatedMirrors(of:)``).
    init(_ request: DownloadRequest, _ configuration: DownloadConfiguration, mirrors: [HTTPURL]) {
        self.init(destination: request.destination)
        if case .directory(_, let rule) = request.destination, let url = try? HTTPURL(request.url) {
            let fileID: String? = if case .fileID(let id) = rule { id } else { nil }
            ruleFileName = FileNaming.fileName(
                forURL: url.absoluteString, pathExtension: url.pathExtension, fileID: fileID,
                md5Hex: EngineMachine.md5Hex)
        }
        headers = request.headers
        credentialHeaderNames = request.credentialHeaderNames
        connections = configuration.connections
        self.mirrors = mirrors
        maxLinkMirrors = configuration.maxLinkMirrors
        pieceChecksums = request.pieceChecksums
        minimumSegmentSize = configuration.minimumSegmentSize
        maxRedirects = configuration.maxRedirects
        allowsInsecureRedirects = configuration.allowsInsecureRedirects
        hasURLProvider = configuration.urlProvider != nil
        maxURLRefreshes = configuration.maxURLRefreshes
        retries = configuration.retries
        retryBaseDelay = configuration.retryBaseDelay.asSeconds
        maxRetryDelay = configuration.maxRetryDelay.asSeconds
        checksum = request.checksum
        checksDigestHeader = configuration.checksDigestHeader
        lowSpeedLimit = configuration.lowSpeedLimit
        lowSpeedTime = configuration.lowSpeedTime.asSeconds
        preallocates = configuration.preallocates
        smallBodies = configuration.directWrites ? SmallBodyGather.rule : nil
    }
}

extension DownloadStateMachine {
    /// The lowercase hex MD5 of `text` (a URL that names a file, ``FileNamingRule/md5OfURL``).
    static func md5Hex(_ text: String) -> String {
        DKDigest.hex(DKDigest.hash(.md5, Array(text.utf8)))
    }
}

extension FileNaming {
    /// The name a response suggests for a directory download, sanitised (``sanitizedFileName(_:)``): the
    /// `Content-Disposition` file name, else the last path segment of `url`, the URL the request went to; nil
    /// when neither gives a usable name. The one place that computes it: sanitising normalises to NFC, which
    /// only Foundation offers, so the machine is handed the result with the head
    /// (`DownloadStateMachine.responseHead(_:suggestedFileName:wallClock:)`) and decides whether and when a
    /// download takes it.
    static func suggestedFileName(for head: ResponseHead, at url: HTTPURL) -> String? {
        head.headers.first(name: "Content-Disposition")
            .flatMap { try? ContentDisposition(parsing: $0) }?.preferredFilename
            .flatMap(sanitizedFileName)
            ?? url.lastPathSegment.flatMap(sanitizedFileName)
    }
}
