"""retarget.report"""
