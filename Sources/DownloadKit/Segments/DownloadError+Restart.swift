extension DownloadError {
    /// An internal signal that the partial data must be discarded and the download started over.
    static func restart(_ reason: RestartReason) -> DownloadError {
        var error = DownloadError(.serverIgnoredRange, "restart: \(reason.rawValue)")
        error.restartReason = reason
        return error
    }
}
