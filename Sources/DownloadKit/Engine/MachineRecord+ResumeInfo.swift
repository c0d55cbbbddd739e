import DownloadKitDecisions
import HTTPWire

extension MachineRecord {
    /// What the download's machine reads of `info` (the one conversion): a recorded original URL that does
    /// not parse is none.
    init(_ info: ResumeInfo) {
        self.init(
            originalURL: try? HTTPURL(info.originalURL), entityTag: info.entityTag, lastModified: info.lastModified,
            totalLength: info.totalLength, acceptsRanges: info.acceptsRanges, fileName: info.fileName,
            bytesReceived: info.bytesReceived, segments: info.segments)
    }
}
