import DownloadKitDecisions
import HTTPWire

/// The download machine's failures as the library reports them: the one place that gives each
/// ``MachineFailure`` its code, message and status.
extension DownloadError: MachineError {
    package init(decided failure: MachineFailure) {
        switch failure {
        case .bodyPastRange(let last):
            self.init(
                .contentRangeMismatch, "the 206 body runs past the end of its Content-Range (byte \(last))", httpStatus: 206,
                isTransient: true)
        case .tooSlow(let rate, let seconds, let limit):
            self.init(
                .tooSlow, "transfer too slow: \(rate) bytes/s for \(seconds) s, below the limit of \(limit) bytes/s",
                isTransient: true)
        case .contentMD5Mismatch(let stated):
            self.init(
                .contentMD5Mismatch, "checksum mismatch: the body does not match the server's Content-MD5 \(Base64.encode(stated))")
        case .truncated(let expected, let received):
            self.init(.truncated, "truncated: expected \(expected) bytes, received \(received)", isTransient: true)
        case .pieceCount(let digests, let total, let pieceLength, let expected):
            self.init(
                .invalidPieceChecksums,
                "invalid piece checksums: \(digests) piece digests for \(total) bytes in pieces of \(pieceLength); expected \(expected)")
        case .pieceMismatch(let piece, let range, let algorithm):
            self.init(
                .pieceChecksumMismatch,
                "\(PieceChecksums.name(piece, range)) failed its \(algorithm) check (one connection: it cannot be fetched again alone)")
        case .checksumMismatch(let algorithm, let computed, let expected, let statedByServer):
            self.init(
                .checksumMismatch,
                statedByServer
                    ? "checksum mismatch: \(algorithm) of the download is \(computed); the server's digest header states \(expected)"
                    : "checksum mismatch: \(algorithm) of the download is \(computed), expected \(expected)")
        case .status(let status, let reason, let url):
            self = .status(status, reason: reason, url: url)
        case .redirectWithoutLocation(let status, let url):
            self.init(.invalidRedirect, "redirect \(status) without a Location header from \(url)")
        case .unusableRedirect(let status, let location, let detail):
            self.init(.insecureRedirect, "refusing redirect to \(location): \(detail)", httpStatus: status)
        case .redirectToHTTP(let status, let target):
            self.init(.insecureRedirect, "refusing redirect from https to http (\(target)); allow it explicitly", httpStatus: status)
        case .tooManyRedirects(let limit, let url):
            self.init(.tooManyRedirects, "too many redirects: more than \(limit) starting at \(url)")
        case .redirectLoop(let url):
            self.init(.redirectLoop, "redirect loop: \(url) was already visited")
        case .rangeMismatch(let status, let detail):
            self.init(.contentRangeMismatch, detail, httpStatus: status, isTransient: true)
        case .tooManyBytes(let received, let total):
            self.init(.protocolViolation, "the server sent \(received) bytes for a resource of \(total) bytes")
        case .noBodyBytes(let offset, let total):
            self.init(
                .contentRangeMismatch, "the server answered with no body bytes at offset \(offset) of \(total)", isTransient: true)
        case .invalidProvidedURL(let redacted):
            self.init(.invalidURL, "the URL provider returned an invalid URL \(redacted)")
        case .restartsExhausted(let count, let last):
            self.init(
                .serverIgnoredRange,
                "the resource changed (or its length, or the server ignored the range) \(count) times in this run, the partial discarded each time (last: \(last.rawValue)); giving up")
        case .internalError(let detail):
            self.init(.internalError, detail)
        }
    }

    package var isCancellation: Bool { code == .cancelled }
}
