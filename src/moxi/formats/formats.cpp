// placeholder.
namespace moxi::formats {}
