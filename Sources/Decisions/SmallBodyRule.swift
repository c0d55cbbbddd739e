/// Which single-connection bodies are gathered whole in memory and written in one piece past the page
/// cache instead of spliced into it (docs/ARCHITECTURE.md, "Segment writes past the page cache"): a body
/// of known length of at least ``minimum`` bytes that fits the gather buffer (``capacity``) from its first
/// byte's place in its ``alignment`` block. The numbers are the executor's (its direct-write minimum, its
/// buffer, the block size); the rule is one, asked by the machine that decides and by the buffer that
/// holds it.
package struct SmallBodyRule: Sendable, Hashable {
    /// The smallest body gathered: smaller writes go through the page cache anyway.
    package var minimum: Int64
    /// The gather buffer's size.
    package var capacity: Int64
    /// The block size direct writes align to.
    package var alignment: Int64

    package init(minimum: Int, capacity: Int, alignment: Int) {
        self.minimum = Int64(minimum)
        self.capacity = Int64(capacity)
        self.alignment = Int64(alignment)
    }

    /// Whether a body of `remaining` bytes starting at file offset `offset` is gathered.
    package func gathers(remaining: Int64, at offset: Int64) -> Bool {
        remaining >= minimum && offset % alignment + remaining <= capacity
    }
}
