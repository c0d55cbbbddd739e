import HTTPWire
import Testing

@testable import DownloadKitDecisions

/// When a resource must not be split: only a weak ETag with no Last-Modified leaves no validator for
/// `If-Range`.
@Suite("SegmentRules")
struct SegmentRulesTests {
    static let rows: [(entityTag: EntityTag?, lastModified: String?, splits: Bool)] = [
        (nil, nil, true),
        (EntityTag(opaque: "v1"), nil, true),
        (EntityTag(opaque: "v1", isWeak: true), nil, false),
        (EntityTag(opaque: "v1", isWeak: true), "Mon, 01 Jan 2024 00:00:00 GMT", true),
        (nil, "Mon, 01 Jan 2024 00:00:00 GMT", true),
    ]

    @Test(arguments: rows.indices) func onlyAWeakETagAloneKeepsOneConnection(_ index: Int) {
        let row = Self.rows[index]
        let reason = SegmentRules.oneConnectionReason(entityTag: row.entityTag, lastModified: row.lastModified)
        #expect((reason == nil) == row.splits)
        if let reason { #expect(reason.contains("weak ETag")) }
    }
}
